"""A run whose latest reward is NaN, as a newcomer met it: a trackio run logging
``train/reward`` NaN at steps 3 and 7 (7 its last step). The run page said "latest
reward —" (as if nothing was logged) while the runs list said "NaN"; compare's
summary said "—" too. Now every page that shows a latest value says "NaN", with the
same tooltip saying why; and the runs list's sparkline breaks at the NaN (it drew a
straight line through step 3) instead of bridging it."""

from __future__ import annotations

import json
import math
import re
import uuid

import pytest
from django.test import Client

from dashboard.models import Run
from dashboard.reads import sparklines
from dashboard.site import tokens

pytestmark = pytest.mark.django_db

NAN_LATEST = (
    '<span class="not-a-number" title="the last logged value is not a number"'
    " data-not-a-number>NaN</span>"
)


def reward_at(step: int) -> float:
    return math.nan if step in (3, 7) else 0.1 * step


def trackio_run(owner, reward, *, name: str, steps: int = 8) -> Run:
    """A run as trackio's client reports it: ``train/reward`` at steps 0..steps-1."""
    token = tokens.do_create_token(owner, f"t-{uuid.uuid4().hex[:6]}")[1]
    run_id = uuid.uuid4().hex
    logs = [
        {
            "project": "walk-nan",
            "run": name,
            "run_id": run_id,
            "metrics": {"train/reward": reward(step), "train/loss": 1 / (step + 1)},
            "step": step,
            "config": {"model": "Qwen/Qwen2.5-0.5B"},
            "log_id": uuid.uuid4().hex,
        }
        for step in range(steps)
    ]
    answer = Client().post(
        "/trackio/api/bulk_log",
        json.dumps({"args": [], "kwargs": {"logs": logs}}),  # NaN as trackio sends it
        content_type="application/json",
        headers={"X-Trackio-Write-Token": token},
    )
    assert answer.json()["error"] is None
    return Run.objects.get(external_id=run_id)


@pytest.fixture
def nan_run(owner):
    return trackio_run(owner, reward_at, name="nan-reward")


def _row(html: str, run: Run) -> str:
    m = re.search(rf'<tr[^>]*data-run-row="{run.pk}".*?</tr>', html, re.S)
    assert m, html
    return m.group(0)


def test_the_run_page_says_nan_for_a_latest_reward_that_is_not_a_number(
    nan_run, owner_client
):
    html = owner_client.get(f"/runs/{nan_run.pk}/").content.decode()
    assert f'data-stat="last_reward">{NAN_LATEST}</div>' in html
    # The best is still the best number logged.
    assert 'data-stat="best_reward">0.6<' in html and "(step 6)" in html


def test_the_runs_list_home_and_compare_say_it_the_same_way(
    nan_run, owner, owner_client
):
    plain = trackio_run(owner, lambda s: 0.05 * s, name="plain")
    listed = owner_client.get("/runs/").content.decode()
    assert f'<td class="col-latest num">{NAN_LATEST}</td>' in _row(listed, nan_run)
    assert '<td class="col-latest num">0.35</td>' in _row(listed, plain)
    home = owner_client.get("/").content.decode()
    assert f'<td class="col-latest num">{NAN_LATEST}</td>' in _row(home, nan_run)
    compare = owner_client.get(f"/compare/?runs={nan_run.pk},{plain.pk}")
    summary = compare.content.decode().split("data-summary", 1)[1].split("</table>")[0]
    assert summary.count(NAN_LATEST) == 1, summary
    assert '<td class="num">0.35</td>' in summary


def test_infinity_is_said_with_its_sign(owner, owner_client):
    run = trackio_run(owner, lambda s: math.inf if s == 7 else 0.1, name="inf")
    html = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert (
        'title="the last logged value is not a number (+∞)" data-not-a-number>∞<'
        in html
    )


def test_a_run_without_a_reward_still_reads_a_dash(owner, owner_client):
    run = trackio_run(owner, lambda s: 0.5, name="none")
    Run.objects.filter(pk=run.pk).update(last_step=0)
    from dashboard.models import MetricPoint

    MetricPoint.objects.filter(run=run, key="train/reward").delete()
    html = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-stat="last_reward">—<' in html


# --- the sparkline ------------------------------------------------------------------
def _segments(d: str) -> list[list[tuple[float, float]]]:
    return [
        [tuple(map(float, p.split(","))) for p in seg.split()]
        for seg in d.split("M")
        if seg.strip()
    ]


def test_the_sparkline_breaks_at_a_nan_and_marks_it(nan_run, owner_client):
    spark = sparklines.sparklines([nan_run])[nan_run.pk]
    # Steps 1-7 sampled (0 is not): 1 2 | 4 5 6 | (7 is NaN): two pieces, the line
    # ending at step 6 (not stretched to the right edge over the NaN at step 7).
    segs = _segments(spark.line)
    assert [[x for x, _ in s] for s in segs] == [
        [0.0, pytest.approx(100 / 6, abs=0.1)],
        [pytest.approx(300 / 6, abs=0.1), pytest.approx(400 / 6, abs=0.1),
         pytest.approx(500 / 6, abs=0.1)],
    ]  # fmt: skip
    # A tick on the top edge at steps 3 and 7.
    assert spark.odd == f"M{200 / 6:.1f},0V5 M100.0,0V5"
    assert spark.note == "NaN at steps 3, 7"
    html = owner_client.get("/runs/").content.decode()
    row = _row(html, nan_run)
    assert f'<path class="spark-line" d="{spark.line}"/>' in row
    assert f'<path class="spark-odd" d="{spark.odd}"/>' in row
    assert 'data-spark-odd="NaN at steps 3, 7"' in row
    assert "<title>NaN at steps 3, 7: not a number" in row


def test_spark_pieces_and_lone_points():
    nan = math.nan
    # A point alone between two NaN is a dot (a zero-length piece), not dropped.
    d = sparklines.spark_svg([(1, 0.0), (2, nan), (3, 1.0), (4, nan), (5, 0.5)])
    assert d == "M0.0,23.0 0.0,23.0 M50.0,1.0 50.0,1.0 M100.0,12.0 100.0,12.0"
    assert sparklines.spark_svg([(1, nan), (2, nan)]) == ""
    only_nan = sparklines.spark([(1, nan), (2, -math.inf)])
    assert only_nan and only_nan.line == "" and only_nan.note == "NaN/−∞ at steps 1, 2"
    whole = sparklines.spark([(1, 0.0), (2, 1.0)])
    assert whole.odd == "" and whole.note == "" and str(whole) == whole.line


def test_sorted_by_reward_a_nan_latest_comes_after_every_number(
    nan_run, owner, owner_client
):
    """PostgreSQL orders NaN above every number (the run led "best reward first");
    SQLite stored it as nothing (last): it is after the numbers on both, before the
    runs that logged no reward at all."""
    low = trackio_run(owner, lambda step: -5.0, name="low-reward")
    high = trackio_run(owner, lambda step: 3.0, name="high-reward")
    none = Run.objects.create(owner=owner, name="no-reward", config={}, external=True)
    html = owner_client.get("/runs/?sort=reward").content.decode()
    order = re.findall(r'data-run-row="([0-9a-f-]+)"', html)
    ranks = [order.index(str(r.pk)) for r in (high, low, nan_run, none)]
    assert ranks == sorted(ranks), (ranks, order)
