"""A TRL run with ``reward_weights``: its components are the reward functions' raw
scores and its reward their weighted sum. Reported through ``/trackio/`` as trackio's
client sends it (``reward_weights=[1.0, 0.2]``, a completions table with
``accuracy_reward`` and ``format_reward``), the trajectory page showed "reward 1.2"
beside "step reward 2", Σ steps 2 and a red ✗ "Per-step rewards do not add up"; the
run page's "Reward components (weighted)" chart plotted the unweighted means. Now each
component counts as score x weight wherever it is summed, the ✗ is kept for numbers
that do not add up, and the chart says what it plots."""

from __future__ import annotations

import html as html_lib
import json
import re
import uuid

import pytest
from dashtest import client_for, trackio_bulk_log

from dashboard.models import Run, Trajectory
from dashboard.site import tokens

pytestmark = pytest.mark.django_db

CONFIG = {
    "num_generations": 2,
    "report_to": ["trackio"],
    "reward_weights": [1.0, 0.2],
    "learning_rate": 1e-6,
}
ROWS = [  # step 1: format pays in three rollouts, accuracy in two
    ("2+2?", "<answer>4</answer>", 1.0, 1.0),
    ("2+2?", "four", 0.0, 0.0),
    ("3+3?", "<answer>6</answer>", 1.0, 1.0),
    ("3+3?", "<answer>7</answer>", 0.0, 1.0),
]


def trl_run(owner, *, config=CONFIG) -> Run:
    """What trackio's client sends for TRL's GRPOTrainer: the config, a step's
    metrics (``train/rewards/<fn>/mean`` unweighted, ``train/reward`` weighted), then
    the completions table."""
    token = tokens.do_create_token(owner, f"t-{uuid.uuid4().hex[:6]}")[1]
    run_id = uuid.uuid4().hex
    table = [
        {
            "step": 1,
            "prompt": p,
            "completion": c,
            "accuracy_reward": acc,
            "format_reward": fmt,
            "advantage": 0.0,
        }
        for p, c, acc, fmt in ROWS
    ]
    metrics = {
        "train/reward": 0.65,  # mean of 1.2, 0, 1.2, 0.2
        "train/rewards/accuracy_reward/mean": 0.5,
        "train/rewards/format_reward/mean": 0.75,
        "train/global_step": 1,
    }
    base = {"project": "trl-weights", "run": "grpo-w", "run_id": run_id}
    logs = [
        {**base, "metrics": metrics, "step": 0, "config": config},
        {
            **base,
            "metrics": {"completions": {"_type": "trackio.table", "_value": table}},
        },
    ]
    for e in logs:
        e["log_id"] = uuid.uuid4().hex
    trackio_bulk_log(token, logs)
    return Run.objects.get(external_id=run_id)


def _text(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def attribution(html: str) -> str:
    return _text(html.split("data-attribution>")[1].split("</section>")[0])


def test_the_weights_are_stored_beside_the_raw_scores(owner):
    run = trl_run(owner)
    t = Trajectory.objects.get(run=run, step=1, group=0, index=0)
    assert t.reward == pytest.approx(1.2)
    assert t.rewards["components"] == {"accuracy_reward": 1.0, "format_reward": 1.0}
    assert t.rewards["weights"] == {"accuracy_reward": 1.0, "format_reward": 0.2}


def test_a_rollout_where_format_paid_adds_up_weighted_on_its_page(owner):
    run = trl_run(owner)
    html = client_for(owner).get(f"/runs/{run.pk}/trajectories/1/0/0/").content
    html = html.decode()
    assert re.search(r"reward <strong>1\.2</strong>", html)
    assert re.findall(r"data-step-total>([^<]*)<", html) == ["1.2"]
    assert "check-bad" not in html and "do not add up" not in html
    table = attribution(html)
    # format_reward: score 1 x weight 0.2 = 0.2 of the total, in total and Σ steps
    assert "format_ reward 1 × 0.2 0.2 0.2 ✓" in table  # (a <wbr> after "_")
    assert "total 1.2 1.2 ✓" in table
    assert "score × its weight" in table
    steps = _text(html.split('class="step-rewards"')[1].split("</table>")[0])
    assert "accuracy_reward 1 " in steps and "format_reward 1 × 0.2 0.2 " in steps
    assert steps.endswith("sum 1.2")  # (PostgreSQL's jsonb orders the names)


def test_numbers_that_do_not_add_up_still_get_the_cross(owner):
    run = trl_run(owner)
    t = Trajectory.objects.get(run=run, step=1, group=0, index=0)
    t.reward = 2.0
    t.rewards = {**t.rewards, "total": 2.0}  # not 1 + 0.2 x 1
    t.save()
    html = client_for(owner).get(f"/runs/{run.pk}/trajectories/1/0/0/").content
    assert "Per-turn rewards do not add up" in html.decode()
    assert "total 2 1.2 ✗" in attribution(html.decode())


def test_a_rollout_stored_without_weights_is_explained_not_crossed(owner):
    # Stored before the weights were kept: the run's reward_weights in some order
    # make its scores add up, so no ✗, and the page says why the sums differ.
    run = trl_run(owner)
    t = Trajectory.objects.get(run=run, step=1, group=0, index=0)
    t.rewards = {k: v for k, v in t.rewards.items() if k != "weights"}
    t.save()
    html = client_for(owner).get(f"/runs/{run.pk}/trajectories/1/0/0/").content
    html = html.decode()
    assert "check-bad" not in html
    assert "weighs them by the run's reward_weights (1, 0.2)" in _text(html)
    t.rewards = {**t.rewards, "total": 5.0}  # no order of the weights makes 5
    t.save()
    html = client_for(owner).get(f"/runs/{run.pk}/trajectories/1/0/0/").content
    assert "Per-turn rewards do not add up" in html.decode()


def charts_of(owner, run) -> dict[str, dict]:
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    raw = html.split('id="page-data" type="application/json">')[1].split("</script>")
    return {c["id"]: c for c in json.loads(raw[0])["charts"]}


def test_the_components_chart_of_a_trl_run_says_its_scores_are_unweighted(owner):
    run = trl_run(owner)
    chart = charts_of(owner, run)["components"]
    assert chart["title"] == "Reward components (unweighted scores)"
    assert "weighted by reward_weights" in chart["help"]
    assert "format_reward × 0.2" in chart["help"]
    assert "accuracy_reward × 1" in chart["help"]
    assert chart["y_title"] == "score"
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "Reward components (weighted)" not in html


def test_without_reward_weights_the_scores_add_up_and_the_chart_says_so(owner):
    run = trl_run(
        owner, config={k: v for k, v in CONFIG.items() if k != "reward_weights"}
    )
    t = Trajectory.objects.get(run=run, step=1, group=0, index=0)
    assert t.reward == 2.0 and "weights" not in t.rewards
    chart = charts_of(owner, run)["components"]
    assert chart["title"] == "Reward components"
    assert "with every weight 1" in chart["help"]


def test_our_own_runs_components_chart_is_still_the_weighted_one(owner):
    from tests.fixtures.seed import seed_run

    run = seed_run(owner, name="ours", env="calc", steps=2)
    chart = charts_of(owner, run)["components"]
    assert chart["title"] == "Reward components (weighted)"


def test_the_trajectories_list_shows_each_scores_weight(owner):
    run = trl_run(owner)
    page = client_for(owner).get(f"/runs/{run.pk}/trajectories/?step=1")
    cards = page.content.decode()
    # format_reward weighs 0.2 (said beside its score); accuracy_reward 1 (nothing).
    assert cards.count("data-weight>× 0.2</span>") == 4
    assert "× 1<" not in cards


def test_a_plain_completion_is_labelled_as_one(owner):
    run = trl_run(owner)
    page = client_for(owner).get(f"/runs/{run.pk}/trajectories/1/0/0/").content
    assert b'<div class="seg-label">completion' in page
    assert b"thought / tool call" not in page
