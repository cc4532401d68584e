"""An external run's reward as its trainer named it: trackio's real client (0.43)
reporting a generic run logs ``train/reward`` (transformers' and TRL's reporting
names it so), never ``reward``. The run page, compare, the lists and the metrics API
read the reward from it; what is stored keeps the trainer's name."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client

from dashboard.models import MetricPoint, Run
from dashboard.reads import sparklines
from dashboard.reads.reward_names import reward_key, reward_names
from dashboard.site import tokens

pytestmark = pytest.mark.django_db


def trackio_run(owner, metrics_at, *, name="grpo-qwen-ext", config=None) -> Run:
    """A run reported through ``/trackio/`` as trackio's client sends it: ``bulk_log``
    entries of ``metrics_at(step)`` at steps 0-19."""
    token = tokens.do_create_token(owner, f"t-{uuid.uuid4().hex[:6]}")[1]
    run_id = uuid.uuid4().hex
    logs = [
        {
            "project": "walk1-trackio",
            "run": name,
            "run_id": run_id,
            "metrics": metrics_at(step),
            "step": step,
            "config": config or {"model": "Qwen/Qwen2.5-0.5B", "lr": 1e-5},
            "log_id": uuid.uuid4().hex,
        }
        for step in range(20)
    ]
    answer = Client().post(
        "/trackio/api/bulk_log",
        json.dumps({"args": [], "kwargs": {"logs": logs}}),
        content_type="application/json",
        headers={"X-Trackio-Write-Token": token},
    )
    assert answer.json()["error"] is None
    return Run.objects.get(external_id=run_id)


def trl_names(step: int) -> dict[str, float]:
    return {
        "train/reward": 0.1 * step,
        "train/loss": 1.0 / (step + 1),
        "train/grad_norm": 0.5,
    }


def test_the_run_page_reads_the_reward_a_trackio_run_logged_as_train_reward(
    owner, owner_client
):
    run = trackio_run(owner, trl_names)
    assert run.framework == "trackio"
    stored = set(MetricPoint.objects.filter(run=run).values_list("key", flat=True))
    assert "train/reward" in stored and "reward" not in stored  # kept as sent
    page = owner_client.get(f"/runs/{run.pk}/")
    html = page.content.decode()
    assert 'data-stat="last_reward">1.9<' in html
    assert 'data-stat="best_reward">1.9<' in html and "(step 19)" in html
    assert page.context["page_data"]["reward_key"] == "train/reward"


def test_compare_summarises_and_overlays_the_reward_of_a_run_logging_train_reward(
    owner, owner_client
):
    a = trackio_run(owner, trl_names, name="a")
    b = trackio_run(owner, lambda s: {"train/reward": 1.0 - 0.01 * s}, name="b")
    page = owner_client.get(f"/compare/?runs={a.pk},{b.pk}")
    rows = {s["run"].pk: s for s in page.context["summary"]}
    assert rows[a.pk]["stats"].last_reward == pytest.approx(1.9)
    assert rows[a.pk]["best"] == pytest.approx(1.9)
    assert rows[b.pk]["best"] == pytest.approx(1.0)
    data = page.context["page_data"]
    assert data["default_key"] == "reward" and "reward" in data["keys"]
    # compare.js asks each run's metrics API for ``reward``: the trainer's series.
    series = owner_client.get(f"/api/runs/{a.pk}/metrics?keys=reward").json()
    assert series["series"]["reward"]["last"][-1] == pytest.approx(1.9)
    both = owner_client.get(f"/api/runs/{a.pk}/metrics?keys=reward,train/loss").json()
    assert set(both["series"]) == {"reward", "train/loss"}


def test_the_reward_chart_plots_the_reward_a_trackio_run_logged_as_train_reward(
    owner, owner_client
):
    """Not a generic "train/" chart with loss, KL and entropy on one axis beside an
    empty Reward chart: the Reward chart plots it (the live frames' ``train/reward``
    reach it by the same key), its spread beside it."""
    run = trackio_run(
        owner,
        lambda s: {
            **trl_names(s),
            "train/reward_std": 0.2,
            "train/kl": 0.01,
            "train/entropy": 1.0,
        },
    )
    page = owner_client.get(f"/runs/{run.pk}/")
    charts = {c["id"]: c for c in page.context["page_data"]["charts"]}
    assert charts["reward"]["keys"] == ["train/reward", "train/reward_std"]
    assert charts["reward"]["title"] == "Reward"
    drawn = [k for c in charts.values() if c["id"] != "reward" for k in c["keys"]]
    assert "train/reward" not in drawn and "train/reward_std" not in drawn
    assert "train/loss" in drawn and "train/kl" in drawn
    html = page.content.decode()
    assert html.index('data-chart="reward"') < html.index('data-chart="extra-train"')
    # Without a spread logged, the reward alone; and our own runs keep theirs.
    alone = trackio_run(owner, lambda s: {"rewards/mean": 0.5}, name="generic")
    page = owner_client.get(f"/runs/{alone.pk}/")
    (chart,) = [c for c in page.context["page_data"]["charts"] if c["id"] == "reward"]
    assert chart["keys"] == ["rewards/mean"]
    assert all(c["id"] != "components" for c in page.context["page_data"]["charts"])


def test_the_lists_sort_and_draw_an_external_runs_reward_by_its_trainers_name(
    owner, owner_client
):
    low = trackio_run(owner, lambda s: {"train/reward": 0.1}, name="low")
    high = trackio_run(owner, lambda s: {"train/rewards/mean": 0.2 + s}, name="high")
    page = owner_client.get("/runs/?sort=reward")
    rows = [r for r, _, _ in page.context["rows"]]
    assert [r.name for r in rows] == ["high", "low"]
    assert rows[0].last_reward == pytest.approx(19.2)
    sparks = sparklines.sparklines([low, high])
    assert sparks[low.pk] and sparks[high.pk]


def test_reward_is_read_from_the_names_trainers_log_it_under_ours_first(owner):
    names = reward_names()
    assert names[:2] == ["reward", "train/reward"]
    # TRL (1.16, GRPOTrainer: _metrics[mode]["reward"]) and every framework's
    # mean-reward name the importers map; generic spellings after them.
    assert {"critic/score/mean", "rollout/raw_reward", "train/rewards/mean"} <= set(
        names
    )
    both = trackio_run(owner, lambda s: {"reward": 1.0, "train/reward": 2.0}, name="x")
    assert reward_key(both) == "reward"
    verl = trackio_run(owner, lambda s: {"critic/score/mean": 0.3}, name="v")
    assert reward_key(verl) == "critic/score/mean"
    # A reward function's own mean is a component, not the reward.
    parts = trackio_run(owner, lambda s: {"train/rewards/says/mean": 1.0}, name="p")
    assert reward_key(parts) == "reward"


def test_our_own_runs_still_read_reward_and_nothing_else(owner):
    ours = Run.objects.create(owner=owner, name="ours", config={}, status="running")
    MetricPoint.objects.create(run=ours, step=1, key="train/reward", value=5.0)
    assert reward_key(ours) == "reward"
    from dashboard.reads.runs import run_stats

    assert run_stats(ours).last_reward is None
