"""The pages: what each shows, who may see it, and the actions they offer."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.models import Run, Trajectory
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def swarm(owner):
    return seed_run(
        owner, name="swarm-dr", env="swarm", preset="dr_grpo", steps=12, alert_every=5
    )


@pytest.fixture
def calc(owner):
    return seed_run(
        owner, name="calc-grpo", env="calc", preset="grpo", steps=12, seed=1
    )


def test_anonymous_visitors_are_sent_to_the_login_page(client, swarm):
    for url in ("/", "/runs/", "/runs/new/", f"/runs/{swarm.pk}/", "/compare/"):
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/"), (
            url
        )


def test_someone_elses_run_is_not_found_anywhere(swarm, other):
    c = login(other)
    for url in (
        f"/runs/{swarm.pk}/",
        f"/runs/{swarm.pk}/trajectories/",
        f"/runs/{swarm.pk}/trajectories/1/0/0/",
        f"/runs/{swarm.pk}/critical-path/",
        f"/runs/{swarm.pk}/clone/",
    ):
        assert c.get(url).status_code == 404, url
    assert c.post(f"/runs/{swarm.pk}/cancel/").status_code == 404
    assert c.post(f"/runs/{swarm.pk}/clone/check/").status_code == 404
    assert c.get(f"/compare/?runs={swarm.pk},{swarm.pk}x").status_code == 404
    assert b"swarm-dr" not in c.get("/runs/").content


def test_staff_see_every_run(swarm, staff):
    assert b"swarm-dr" in login(staff).get("/runs/").content
    assert login(staff).get(f"/runs/{swarm.pk}/").status_code == 200


def test_the_runs_list_shows_status_progress_sparkline_algorithm_owner_and_age(
    owner, swarm, calc
):
    html = login(owner).get("/runs/").content.decode()
    assert "swarm-dr" in html and "calc-grpo" in html
    assert '<progress max="12" value="12"' in html
    assert html.count('<svg class="spark"') == 2
    assert (
        "Dr. GRPO (the &#x27;Cursor&#x27; variant)" in html
        and "GRPO (DeepSeekMath)" in html
    )
    assert "owner" in html and "ago" in html
    assert html.count("data-compare-box") == 2


def test_the_runs_list_filters_and_sorts(owner, swarm, calc):
    c = login(owner)
    assert b"calc-grpo" not in c.get("/runs/?algorithm=dr_grpo").content
    assert b"swarm-dr" not in c.get("/runs/?env=calc").content
    assert b"swarm-dr" not in c.get("/runs/?q=calc").content
    # Any letter's case, not ASCII's alone (SQLite's LIKE folds only those).
    Run.objects.filter(pk=calc.pk).update(name="données café")
    for q in ("DONNÉES", "Données", "CAFÉ", "données"):
        assert "données café" in c.get("/runs/", {"q": q}).content.decode(), q
    assert "données café" not in c.get("/runs/", {"q": "DONNEES"}).content.decode()
    Run.objects.filter(pk=calc.pk).update(name="calc-grpo")
    Run.objects.filter(pk=calc.pk).update(status="running")
    active = c.get("/runs/?status=active").content
    assert b"calc-grpo" in active and b"swarm-dr" not in active
    by_name = c.get("/runs/?sort=name").content.decode()
    assert by_name.index("calc-grpo") < by_name.index("swarm-dr")
    for sort in ("new", "old", "status", "progress", "reward"):
        assert c.get(f"/runs/?sort={sort}").status_code == 200
    # A misspelt filter is said, not ignored (it listed every run).
    r = c.get("/runs/?status=bogus")
    assert (
        r.status_code == 400
        and "status: &#x27;bogus&#x27; is not one of active" in r.content.decode()
    )
    r = c.get("/runs/?sort=newest")
    assert (
        r.status_code == 400
        and "sort: &#x27;newest&#x27; is not one of" in r.content.decode()
    )


def test_home_shows_active_and_recent_runs_and_alerts(owner, swarm):
    html = login(owner).get("/").content.decode()
    assert "swarm-dr" in html and "serial_collapse" in html and "Recent alerts" in html


def test_the_run_page_carries_what_its_scripts_need(owner, swarm):
    r = login(owner).get(f"/runs/{swarm.pk}/")
    html = r.content.decode()
    data = r.context["page_data"]
    assert data["ws_path"] == f"/ws/runs/{swarm.pk}/"
    assert data["backfill_url"] == f"/api/runs/{swarm.pk}/backfill"
    assert [c["id"] for c in data["charts"]][:2] == ["reward", "components"]
    assert "rewards/r_perf/mean" in data["charts"][1]["keys"]
    assert [a["step"] for a in data["alerts"]] == [5, 10]
    assert data["latest_trajectory_step"] == 12
    assert 'id="page-data" type="application/json"' in html
    for chart in (
        "reward",
        "advantages",
        "kl",
        "entropy",
        "clip",
        "lengths",
        "critical",
        "dropped",
        "throughput",
    ):
        assert f'data-chart="{chart}"' in html
    assert "Critical path" in html and "Clone and edit" in html


def test_cancel_goes_through_the_service(owner, swarm):
    Run.objects.filter(pk=swarm.pk).update(status="queued")
    r = login(owner).post(f"/runs/{swarm.pk}/cancel/")
    assert r.status_code == 302
    swarm.refresh_from_db()
    assert swarm.status == "cancelled" and swarm.cancel_requested
    again = login(owner).post(f"/runs/{swarm.pk}/cancel/", follow=True)
    assert b"already cancelled" in again.content


def test_trajectories_of_a_step_grouped_with_filters(owner, swarm):
    c = login(owner)
    r = c.get(f"/runs/{swarm.pk}/trajectories/?step=3")
    groups = r.context["groups"]
    assert r.context["step"] == 3 and [g.group for g in groups] == [0, 1]
    assert all(len(g.rollouts) == 4 for g in groups)
    pos = c.get(f"/runs/{swarm.pk}/trajectories/?step=3&sign=pos").context["groups"]
    assert all(t.advantage > 0 for g in pos for t in g.rollouts)
    assert (
        c.get(f"/runs/{swarm.pk}/trajectories/?step=3&dropped=only").context["groups"]
        == []
    )
    rmin = c.get(f"/runs/{swarm.pk}/trajectories/?step=3&reward_min=0.5").context[
        "groups"
    ]
    assert all(t.reward >= 0.5 for g in rmin for t in g.rollouts)
    nearest = c.get(f"/runs/{swarm.pk}/trajectories/?step=999")
    assert nearest.context["step"] == 12 and b"showing the nearest" in nearest.content


def test_one_trajectory_shows_steps_attribution_judges_and_gantt(owner, swarm):
    r = login(owner).get(f"/runs/{swarm.pk}/trajectories/2/0/1/")
    view = r.context["view"]
    html = r.content.decode()
    assert len(view.steps) == 3 and view.all_ok
    assert [name for name, _ in view.steps[0].rewards] == [
        "r_perf",
        "r_parallel",
        "r_finish",
        "format",
        "judge",
    ]
    # The rules judge's verdict sits next to the step it judged (target_step = index 1).
    assert [j.judge for j in view.steps[1].judgements] == ["rules"]
    assert "rule-based:" in html and "Per-turn rewards sum to each component" in html
    assert 'class="gantt"' in html and "data-critical" in html
    assert 'id="heatmap-data" type="application/json"' in html
    assert r.context["prev_url"].endswith("/2/0/0/") and r.context["next_url"].endswith(
        "/2/0/2/"
    )


def test_a_trajectory_whose_steps_do_not_add_up_is_flagged(owner, swarm):
    t = Trajectory.objects.get(run=swarm, step=2, group=0, index=1)
    t.rewards = {**t.rewards, "total": t.rewards["total"] + 1.0}
    t.save()
    html = login(owner).get(f"/runs/{swarm.pk}/trajectories/2/0/1/").content.decode()
    assert "do not add up" in html and "check-bad" in html


def test_the_critical_path_page_links_gantt_and_reward(owner, swarm):
    r = login(owner).get(f"/runs/{swarm.pk}/critical-path/?step=4&group=1&index=2")
    assert r.context["chosen"].group == 1 and r.context["chosen"].index == 2
    html = r.content.decode()
    assert (
        "The reward it produced" in html
        and f"/runs/{swarm.pk}/trajectories/4/1/2/" in html
    )
    assert len(r.context["rows"]) == 8


def test_the_critical_path_page_says_why_it_opened_at_an_earlier_step(owner, swarm):
    from django.db.models import F

    from dashboard.models import CriticalPath

    last = CriticalPath.objects.filter(run=swarm).order_by("-step").first().step
    # Sub-agents ran side by side at step 3 only.
    CriticalPath.objects.filter(run=swarm).exclude(step=3).update(
        total_steps=F("critical_steps")
    )
    CriticalPath.objects.filter(run=swarm, step=3).update(
        total_steps=F("critical_steps") + 5
    )
    r = login(owner).get(f"/runs/{swarm.pk}/critical-path/")
    assert r.context["step"] == 3 and last > 3
    html = r.content.decode()
    assert (
        "Step 3: the latest step where a rollout's sub-agents ran in parallel" in html
    )
    assert f'<a href="?step={last}">see step {last}</a>' in html
    asked = login(owner).get(f"/runs/{swarm.pk}/critical-path/?step=3").content
    assert b"data-picked-parallel" not in asked  # asked for: nothing to explain


def test_the_critical_path_page_of_a_swarm_run_in_its_warm_start_says_so(owner):
    """Before step 1 a swarm run has no critical path yet: the page says when they
    come, not that they come from swarm runs (a walk read that on the swarm demo)."""
    from dashboard.models import RunStatus

    run = Run.objects.create(
        owner=owner,
        name="swarm-warming",
        status=RunStatus.RUNNING,
        config={"env": {"name": "swarm"}, "model": {"warmstart_steps": 300}},
        last_step=0,
        warmup={"done": 176, "of": 300, "loss": 1.0},
    )
    html = login(owner).get(f"/runs/{run.pk}/critical-path/").content.decode()
    assert "data-before-step-1" in html and "come from orchestration" not in html
    assert "they are recorded from step 1. Warm start: 176 of 300 steps" in html


def test_a_stored_critical_path_of_any_shape_draws_a_bounded_page(owner, swarm):
    """Rows stored before the schema checked stages: text where a count goes was a
    500, 900,000 sub-agents a 101 MB page (both pages draw the timeline)."""
    from dashboard.models import CriticalPath

    cp = CriticalPath.objects.filter(run=swarm, step=4).first()
    for stages in (
        [[1, "x"], {"orchestrator_steps": "2", "subagents": [{"steps": [1]}, None]}],
        [[1, [1] * 900_000]],
        [7, "stage", {"subagents": {"a": 1}}, [1e308, ["NaN", -3, True]]],
    ):
        CriticalPath.objects.filter(pk=cp.pk).update(stages=stages, path=["0", None])
        for url in (
            f"/runs/{swarm.pk}/critical-path/?step=4&group={cp.group}&index={cp.index}",
            f"/runs/{swarm.pk}/trajectories/4/{cp.group}/{cp.index}/",
        ):
            r = login(owner).get(url)
            assert r.status_code == 200, (stages[:1], url)
            assert len(r.content) < 3_000_000


def test_compare_shows_summary_config_diff_charts_and_the_same_task(owner, swarm):
    clone = seed_run(
        owner, name="swarm-clone", env="swarm", preset="dr_grpo", steps=12, parent=swarm
    )
    r = login(owner).get(f"/compare/?runs={swarm.pk},{clone.pk}")
    assert r.status_code == 200
    paths = [d.path for d in r.context["diff"]]
    assert paths == ["name"]  # same config otherwise
    assert len(r.context["summary"]) == 2 and r.context["summary"][0]["alerts"] == 2
    assert r.context["tasks"] and r.context["task"] == r.context["tasks"][0]
    assert all(col.rollouts for col in r.context["side_by_side"])
    assert "reward" in r.context["page_data"]["keys"]


def test_compare_says_a_run_that_never_stepped_has_no_tasks_to_line_up(owner, swarm):
    cancelled = seed_run(owner, name="never ran", steps=12, done=0, status="cancelled")
    r = login(owner).get(f"/compare/?runs={swarm.pk},{cancelled.pk}")
    assert r.status_code == 200 and not r.context["tasks"]
    text = r.content.decode()
    assert "never ran</a> recorded no step yet" in text
    assert "different seeds or environments" not in text


def test_compare_wants_two_to_eight_runs(owner, swarm):
    c = login(owner)
    assert b"between 2 and 8" in c.get("/compare/").content
    assert c.get(f"/compare/?runs={swarm.pk}").status_code == 400
    many = ",".join(str(seed_run(owner, steps=1, done=1, seed=i).pk) for i in range(9))
    assert c.get(f"/compare/?runs={many}").status_code == 400
    # ?runs=a&runs=b works as well as ?runs=a,b
    other = seed_run(owner, steps=2, seed=5)
    assert c.get(f"/compare/?runs={swarm.pk}&runs={other.pk}").status_code == 200


def test_held_out_evaluation_is_charted_on_the_run_page_and_summarised_in_compare(
    owner, calc
):
    from dashboard.ingest import writer
    from tests.fixtures.seed import valid_config

    config = valid_config("calc", "grpo", 12, name="calc-eval", eval={"every": 4})
    evald = seed_run(owner, name="calc-eval", env="calc", steps=12, config=config)
    writer.insert_metrics(
        evald.id, {(4, "eval/pass@k"): 0.25, (8, "eval/pass@k"): 0.625}
    )
    c = login(owner)
    charts = c.get(f"/runs/{evald.pk}/").context["page_data"]["charts"]
    assert [ch["id"] for ch in charts][:3] == ["reward", "components", "eval"]
    assert "eval/pass@k" in charts[2]["keys"]
    plain = c.get(f"/runs/{calc.pk}/").context["page_data"]["charts"]
    assert "eval" not in [ch["id"] for ch in plain]  # no eval configured, none drawn
    r = c.get(f"/compare/?runs={evald.pk},{calc.pk}")
    summary = r.context["summary"]
    assert [s["stats"].last_pass_at_k for s in summary] == [0.625, None]
    assert r.context["page_data"]["extra_keys"] == ["eval/pass@k"]
    assert "held-out pass@k" in r.content.decode()


def test_an_empty_parsed_answer_says_so(owner, calc):
    t = Trajectory.objects.filter(run=calc).first()
    Trajectory.objects.filter(pk=t.pk).update(
        facts={**t.facts, "reference": "7", "answer": ""}
    )
    url = f"/runs/{calc.pk}/trajectories/{t.step}/{t.group}/{t.index}/"
    html = login(owner).get(url).content.decode()
    assert "empty: the final answer held no text" in html


@pytest.mark.parametrize("span", [1, 9, 13, 14, 21, 100])
def test_the_gantt_axis_ends_at_the_last_step_inside_the_chart(span):
    from dashboard.pages.gantt import Gantt

    ticks = Gantt([], 1, span, span, span, [0]).ticks()
    assert ticks[0] == {"x": 0, "t": 0, "anchor": "start"}
    assert ticks[-1] == {"x": 100, "t": span, "anchor": "end"}  # 14 drawn at 13's end
    assert all(t["anchor"] == "middle" for t in ticks[1:-1])
    assert 2 <= len(ticks) <= 12


@pytest.mark.parametrize(
    ("advantages", "label"),
    [([-2.18, 0.1, 0.94], "mean advantage"), ([-0.5, -0.5, -0.5], "advantage")],
)
def test_a_rollout_whose_tokens_have_their_own_advantages_says_mean(
    owner, advantages, label
):
    from dashboard.ingest import writer
    from dashboard.models import Run

    run = Run.objects.create(
        owner=owner, name="ppo", status="succeeded", last_step=1, config={}
    )
    batch = writer.Batch()
    batch.add(run.id, {
        "type": "trajectory", "step": 1, "group": 0, "index": 0, "task_id": "t",
        "reward": 1.0, "advantage": sum(advantages) / 3, "num_turns": 1, "length": 3,
        "rewards": {"total": 1.0, "components": {"outcome": 1.0}},
        # The prompt's tokens hold 0 (context, not trained), as ours store them.
        "segments": [{"turn": 0, "kind": "prompt", "text": "pq", "mask": "prompt",
                      "token_ids": [7, 8], "tokens": ["p", "q"],
                      "advantage": [None, 0.0]},
                     {"turn": 0, "kind": "action", "text": "abc", "mask": None,
                      "token_ids": [1, 2, 3], "tokens": ["a", "b", "c"],
                      "advantage": advantages}],
    })  # fmt: skip
    writer.write(run.id, batch)
    html = login(owner).get(f"/runs/{run.pk}/trajectories/1/0/0/").content.decode()
    assert f"<span>{label} <strong" in html
    ranged = "(per token -2.18 to 0.94)" in html.replace("−", "-")
    assert ranged == (label == "mean advantage")
