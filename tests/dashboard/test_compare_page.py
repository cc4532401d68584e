"""The compare page as a user walking it found it (dashboard.pages.compare):

1. three runs, two of them sharing every task: the tasks those two share, and which
   runs share them, instead of "share no task";
2. the summary alone (``?part=summary``), which the page asks for while a run is live;
3. the charts kept in the URL (``&charts=``), validated, unknown keys named, no 500;
4. TRL's ``learning_rate`` charted with our ``lr`` (trainer.metric_names), each run's
   line saying which key it came from;
5. one colour per run whatever the order of ``?runs=``.
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import urlencode

import pytest
from django.db.models import F, Value
from django.db.models.functions import Concat

from dashboard.ingest import writer
from dashboard.models import Run, Trajectory
from dashboard.runs import external
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db

SHARE_NONE = "The runs share no task"


def page_data(r) -> dict:
    """What the page hands its scripts (its compare-data JSON)."""
    m = re.search(r'<script id="compare-data" type="application/json">(.*?)</script>',
                  r.content.decode(), re.S)  # fmt: skip
    assert m, r.content.decode()[:2000]
    return json.loads(m.group(1))


@pytest.fixture
def three(owner):
    """A and B: swarm runs of one seed, the same 12 tasks; C: a calc run whose tasks
    are its own."""
    a = seed_run(owner, name="swarm-a", env="swarm", steps=3, groups=4)
    b = seed_run(owner, name="swarm-b", env="swarm", steps=3, groups=4, seed=1)
    c = seed_run(owner, name="calc-c", env="calc", preset="grpo", steps=3, groups=3)
    Trajectory.objects.filter(run=c).update(task_id=Concat(Value("calc-"), F("group")))
    return a, b, c


def test_three_runs_list_the_tasks_two_of_them_share(owner_client, three):
    a, b, c = three
    pair = owner_client.get(f"/compare/?runs={a.pk},{b.pk}")
    assert len(pair.context["tasks"]) == 12

    r = owner_client.get(f"/compare/?runs={c.pk},{b.pk},{a.pk}")
    assert r.status_code == 200
    text = r.content.decode()
    assert SHARE_NONE not in text and "No two of the runs" not in text
    assert sorted(r.context["tasks"]) == sorted(pair.context["tasks"])
    assert not pair.context["partial"] and r.context["partial"]
    (group,) = r.context["task_groups"]
    assert [x.name for x in group.runs] == ["swarm-b", "swarm-a"]
    assert [x.name for x in group.others] == ["calc-c"] and group.count == 12
    assert "No task was sampled by all 3 runs" in text
    assert (
        "swarm-b</a> and <a" in text and "share 12 tasks; calc-c sampled none" in text
    )
    # The task picked is shown for the runs that sampled it, and followed in them.
    assert [col.run.name for col in r.context["side_by_side"]] == ["swarm-b", "swarm-a"]
    assert all(col.rollouts for col in r.context["side_by_side"])
    assert str(c.pk) not in r.context["task_query"]
    assert '<optgroup label="swarm-b, swarm-a">' in text


def test_only_no_two_runs_sharing_a_task_says_so(owner_client, three):
    a, b, c = three
    Trajectory.objects.filter(run=b).update(task_id=Concat(Value("b-"), F("group")))
    r = owner_client.get(f"/compare/?runs={c.pk},{b.pk},{a.pk}")
    assert not r.context["tasks"] and not r.context["task_groups"]
    assert "No two of the runs share a task" in r.content.decode()


def test_tasks_every_run_shares_are_listed_alone(owner, owner_client, three):
    a, b, _ = three
    d = seed_run(owner, name="swarm-d", env="swarm", steps=1, groups=4)
    r = owner_client.get(f"/compare/?runs={a.pk},{b.pk},{d.pk}")
    assert not r.context["partial"] and len(r.context["tasks"]) == 4
    assert "data-task-groups" not in r.content.decode()


def test_the_summary_alone_marks_the_live_runs(owner, owner_client):
    done = seed_run(owner, name="done", steps=3)
    live = external.do_create_external_run(owner, name="live", framework="trl")
    external.do_ingest_events(
        live, [{"type": "step", "step": s, "metrics": {"reward": 0.1}} for s in (1, 2)]
    )
    url = f"/compare/?runs={live.pk},{done.pk}"
    r = owner_client.get(url + "&part=summary")
    assert r.status_code == 200 and "Content-Security-Policy" in r
    part = r.content.decode()
    assert "<html" not in part and "Config differences" not in part
    full = owner_client.get(url).content.decode()
    assert "js/compare_live.js" in full and "data-live-every-ms" in full
    assert part.count("data-live-row") == 1
    assert f'data-run-row="{live.pk}" data-live-row' in part
    external.do_ingest_events(
        live, [{"type": "step", "step": 92, "metrics": {"reward": 0.2}}]
    )
    assert ">92<" in owner_client.get(url + "&part=summary").content.decode()
    external.do_finish_external_run(Run.objects.get(pk=live.pk), "succeeded")
    assert (
        "data-live-row" not in owner_client.get(url + "&part=summary").content.decode()
    )


@pytest.fixture
def pair(owner):
    a = seed_run(owner, name="a", steps=3)
    b = seed_run(owner, name="b", steps=3, seed=2)
    return a, b


def test_charts_in_the_url_are_validated(owner_client, pair):
    a, b = pair
    base = f"/compare/?runs={a.pk},{b.pk}"
    r = owner_client.get(base)
    assert page_data(r)["charts"] == ["reward"] == page_data(r)["default_charts"]
    key = page_data(r)["keys"][1]
    hostile = "<script>alert(1)</script>"
    r = owner_client.get(
        base + "&" + urlencode({"charts": f"{key},nope, {hostile},{key}"})
    )
    assert r.status_code == 200
    assert page_data(r)["charts"] == [key]
    text = r.content.decode()
    notice = re.search(r"data-chart-notice>(.*?)</p>", text).group(1)
    assert (
        html.unescape(notice)
        == f"Not charted: nope, {hostile} (no selected run logged them)."
    )
    assert hostile not in text
    assert f'name="charts" value="{key}"' in text  # the task form keeps them
    # repeated, empty, unknown only, NUL, too many: never a 500
    r = owner_client.get(base + f"&charts=reward&charts={key}")
    assert page_data(r)["charts"] == ["reward", key]
    assert page_data(owner_client.get(base + "&charts="))["charts"] == []
    assert page_data(owner_client.get(base + "&charts=nope"))["charts"] == ["reward"]
    # NUL: refused naming the parameter, as every page does (dashboard.site.middleware)
    assert owner_client.get(base + "&charts=a%00b,reward").status_code == 400
    r = owner_client.get(base + "&charts=%ED%A0%80,reward,caf%C3%A9%E2%80%AE")
    assert r.status_code == 200 and page_data(r)["charts"] == ["reward"]
    keys = page_data(r)["keys"]
    r = owner_client.get(base + "&" + urlencode({"charts": ",".join(keys)}))
    assert (
        len(page_data(r)["charts"]) == 12 and "Only the first 12" in r.content.decode()
    )


def test_trl_learning_rate_lines_up_with_our_lr(owner, owner_client):
    ours = seed_run(owner, name="ours", steps=3)
    writer.insert_metrics(ours.pk, {(s, "lr"): 1e-5 for s in (1, 2, 3)})
    trl = external.do_create_external_run(owner, name="trl", framework="trl")
    external.do_ingest_events(
        trl,
        [
            {"type": "step", "step": s, "metrics": {"learning_rate": 2e-6, "reward": 1}}
            for s in (1, 2)
        ],
    )
    generic = external.do_create_external_run(owner, name="tb", framework="trackio")
    external.do_ingest_events(
        generic, [{"type": "step", "step": 1, "metrics": {"train/reward": 0.5}}]
    )
    r = owner_client.get(f"/compare/?runs={ours.pk},{trl.pk},{generic.pk}")
    runs = {x["name"]: x for x in page_data(r)["runs"]}
    # either way round; the trackio run's train/reward is the others' reward too
    assert runs["ours"]["sources"] == {"learning_rate": "lr", "train/reward": "reward"}
    assert runs["trl"]["sources"] == {"lr": "learning_rate", "train/reward": "reward"}
    assert runs["tb"]["sources"] == {"reward": "train/reward"}
    # The metric list offers each meaning once, by our name.
    offered = r.context["keys"]
    assert "lr" in offered and "reward" in offered
    assert "learning_rate" not in offered and "train/reward" not in offered
    # A chart of either name reads both runs' lines from where the sources say.
    api = f"/api/runs/{trl.pk}/metrics?keys=learning_rate"
    assert owner_client.get(api).json()["series"]["learning_rate"]["step"] == [1, 2]


def test_a_run_keeps_its_colour_whatever_the_order(owner, owner_client, pair):
    a, b = pair
    c = seed_run(owner, name="c", steps=2)

    def colours(*runs):
        r = owner_client.get("/compare/?runs=" + ",".join(str(x.pk) for x in runs))
        return {x["name"]: x["colour"] for x in page_data(r)["runs"]}

    assert colours(a, b) == colours(b, a) == {"a": 0, "b": 1}
    assert colours(c, b, a) == {"a": 0, "b": 1, "c": 2}


def test_a_chart_key_that_holds_a_comma_is_kept_whole():
    from dashboard.pages.compare import chart_keys

    keys = ["reward", "lr", "acc,top5"]
    assert chart_keys(["lr,reward", "acc,top5"], keys, ["reward"]) == (
        ["lr", "reward", "acc,top5"],
        "",
    )


def test_a_poll_reads_a_finished_runs_numbers_once(owner, owner_client, pair):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    live = external.do_create_external_run(owner, name="live", framework="trl")
    external.do_ingest_events(
        live, [{"type": "step", "step": 1, "metrics": {"reward": 0.1}}]
    )
    url = f"/compare/?runs={live.pk},{pair[0].pk},{pair[1].pk}&part=summary"
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as seen:
            first = owner_client.get(url).content
        counts.append(len(seen))
    # The second poll reads only the live run's numbers; the page is the same.
    assert counts[1] < counts[0]
    assert owner_client.get(url).content == first


def test_runs_whose_rewards_differ_say_their_totals_are_on_different_scales(
    owner, owner_client, pair
):
    """A walk compared a run whose outcome weighed 2 (and format 0.2) with the calc
    demo and read its higher "final reward" as better: the page now says which
    components differ. Two runs of one reward say nothing of it."""
    a, b = pair
    same = owner_client.get(f"/compare/?runs={a.pk},{b.pk}").content.decode()
    assert "data-reward-differs" not in same
    heavier = Run.objects.get(pk=b.pk)
    components = [
        {"name": "r_perf", "weight": 2.0},
        {"name": "format", "weight": 0.2},
    ]
    heavier.config = {**heavier.config, "reward": {"components": components}}
    heavier.save()
    page = owner_client.get(f"/compare/?runs={a.pk},{b.pk}").content.decode()
    assert "data-reward-differs" in page
    note = html.unescape(page.split("data-reward-differs>", 1)[1].split("</p>", 1)[0])
    # r_perf and format weigh more; the others are in the default swarm reward only.
    assert note.startswith(
        "Their rewards are not made alike: r_perf, r_parallel, r_finish, format, "
        "judge differ (weight"
    )
    assert "on different scales" in note
