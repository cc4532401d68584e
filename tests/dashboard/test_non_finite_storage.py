"""NaN and infinities round-trip on both backends (PostgreSQL, and SQLite, the
embedded default) through the one write path and every read of a stored number: the
rows themselves, the rollups, charts at the point and the rollup level, backfill,
the export, the trajectory and judgement reads, and the best values of compare. A
missing reward or score stays "none given" (null), apart from NaN."""

from __future__ import annotations

import json
import math

import pytest
from django.test import Client
from test_run_api import body_of

from dashboard.models import (
    Judgement,
    MetricPoint,
    MetricRollup,
    Run,
    Trajectory,
)
from dashboard.reads import metrics, runs
from dashboard.site import tokens

pytestmark = pytest.mark.django_db

NAN, INF, NEG = "NaN", "Infinity", "-Infinity"


def _loss(step: int) -> float | str:
    return {5: NAN, 40: NEG}.get(step, step * 0.5)


def _reward(step: int) -> float | str:
    return {10: 0.9, 20: NAN, 30: INF, 31: NEG}.get(step, 0.1)


def _events() -> list[dict]:
    out: list[dict] = [
        {
            "type": "step",
            "step": s,
            "metrics": {
                "loss": _loss(s),
                "grad": INF if s == 64 else 1.0,
                "kl": NAN,
                "reward": _reward(s),
            },
        }
        for s in range(1, 65)
    ]
    out += [
        {"type": "trajectory", "step": 1, "group": 0, "index": 0, "task_id": "t",
         "reward": NAN, "advantage": NEG},
        {"type": "trajectory", "step": 1, "group": 0, "index": 1, "task_id": "t"},
        {"type": "judgement", "step": 1, "group": 0, "index": 0, "judge": "j",
         "score": NAN},
        {"type": "judgement", "step": 1, "group": 0, "index": 0, "judge": "k",
         "ok": False, "error": "timeout"},
    ]  # fmt: skip
    return out


@pytest.fixture
def stored(owner) -> tuple[Client, Run]:
    """A run whose events came in through POST /api/runs/{id}/events."""
    token = tokens.do_create_token(owner, "t")[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    client = Client()
    r = client.post(
        "/api/runs/external",
        {"name": "nan", "framework": "trl", "config": {}},
        content_type="application/json",
        **auth,
    )
    run_id = r.json()["id"]
    body = "".join(json.dumps(e) + "\n" for e in _events())
    r = client.post(
        f"/api/runs/{run_id}/events",
        body,
        content_type="application/x-ndjson",
        **auth,
    )
    assert r.status_code == 200, r.content
    client.force_login(owner)
    return client, Run.objects.get(pk=run_id)


def _is(got, want: float) -> bool:
    return got is not None and ((math.isnan(got) and math.isnan(want)) or got == want)


def test_the_rows_hold_nan_and_infinities_exactly(stored):
    _, run = stored
    points = dict(
        MetricPoint.objects.filter(run=run, key="loss").values_list("step", "value")
    )
    assert _is(points[5], math.nan) and points[40] == -math.inf
    assert points[6] == 3.0
    grad = MetricPoint.objects.get(run=run, key="grad", step=64).value
    assert grad == math.inf
    # The 64-step rollup row of loss (steps 1..63): NaN is its max (PostgreSQL's
    # order, NaN above every number), -inf its min, step 63 its last.
    row = MetricRollup.objects.get(run=run, key="loss", shift=6, bucket=0)
    assert _is(row.vmax, math.nan) and row.smax == 5
    assert (row.vmin, row.smin, row.vlast, row.slast) == (-math.inf, 40, 31.5, 63)
    kl = MetricRollup.objects.get(run=run, key="kl", shift=4, bucket=1)
    assert all(_is(v, math.nan) for v in (kl.vmin, kl.vmax, kl.vlast))
    t0, t1 = Trajectory.objects.filter(run=run).order_by("index")
    assert _is(t0.reward, math.nan) and t0.advantage == -math.inf
    assert t1.reward is None and t1.advantage is None  # none given
    scores = dict(Judgement.objects.filter(run=run).values_list("judge", "score"))
    assert _is(scores["j"], math.nan) and scores["k"] is None


def test_queries_see_nan_as_postgresql_does(stored):
    """Equal to itself and above every number, on both backends."""
    _, run = stored
    loss = MetricPoint.objects.filter(run=run, key="loss")
    assert list(loss.filter(value=math.nan).values_list("step", flat=True)) == [5]
    top = loss.order_by("-value").values_list("step", flat=True).first()
    assert top == 5
    assert loss.filter(value__gt=1e308).count() == 1  # the NaN


def test_charts_read_them_from_points_and_from_rollups(stored):
    client, run = stored
    r = client.get(f"/api/runs/{run.pk}/metrics", {"keys": "loss,grad,kl"})
    series = json.loads(r.content)["series"]  # strict JSON
    assert series["loss"]["step"] == list(range(1, 65))  # one point a bucket
    assert series["loss"]["last"][4] == NAN and series["loss"]["min"][39] == NEG
    assert series["grad"]["max"][63] == INF and set(series["kl"]["last"]) == {NAN}
    # Two points over 64 steps: the 64-step rollup rows.
    coarse = metrics.downsample_metrics(run, ["loss", "grad"], points=2)
    loss, grad = coarse["series"]["loss"], coarse["series"]["grad"]
    assert coarse["bucket_width"] == 64
    assert (loss["max"][0], loss["max_step"][0]) == (NAN, 5)
    assert (loss["min"][0], loss["min_step"][0], loss["last"][0]) == (NEG, 40, 31.5)
    assert grad["max"] == [1.0, INF] and grad["last"] == [1.0, INF]


def test_backfill_and_export_write_them_as_strings(stored):
    client, run = stored
    back = client.get(f"/api/runs/{run.pk}/backfill", {"since_step": 4}).json()
    step5 = next(s for s in back["steps"] if s["step"] == 5)
    assert step5["metrics"]["loss"] == NAN and step5["metrics"]["kl"] == NAN
    r = client.get(f"/api/runs/{run.pk}/export")
    lines = [json.loads(x) for x in body_of(r).splitlines()]
    steps = {e["step"]: e["metrics"] for e in lines if e["type"] == "step"}
    assert steps[5]["loss"] == NAN and steps[40]["loss"] == NEG
    assert steps[64]["grad"] == INF
    trajs = [(e["reward"], e["advantage"]) for e in lines if e["type"] == "trajectory"]
    assert trajs == [(NAN, NEG), (None, None)]
    judged = {e["judge"]: e["score"] for e in lines if e["type"] == "judgement"}
    assert judged == {"j": NAN, "k": None}


def test_the_trajectory_reads_keep_nan_apart_from_none_given(stored):
    client, run = stored
    got = client.get(f"/api/runs/{run.pk}/trajectories", {"step": 1}).json()
    assert [(t["reward"], t["advantage"]) for t in got["trajectories"]] == [
        (NAN, NEG),
        (None, None),
    ]


def test_best_values_are_the_best_numbers(stored):
    """Compare's best reward and the run's stats skip NaN and infinities."""
    _, run = stored
    assert metrics.best_rewards([run.pk]) == {run.pk: 0.9}
    stats = runs.run_stats(run)
    assert (stats.best_reward, stats.best_step, stats.last_reward) == (0.9, 10, 0.1)
