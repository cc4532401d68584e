"""What one request may store, bounding how long it holds the embedded database's
write lock (another writer waits 30 s, then fails with a 500): a prober's 87 KB gzip
body of 990,000 metric values held it 107 s, a trackio call creating 400 runs 79 s,
and a 50,000-row completions table pinned a CPU for minutes (its rows were placed
by rescanning the rows already placed: O(n^2)). Also: entries without a step in one
call each get their own step, and finite rewards summing past the float range are
stored as inf, not refused with a traceback."""

from __future__ import annotations

import math
import uuid

import pytest

from dashboard.models import MetricPoint, Run, Trajectory
from dashboard.site import tokens
from tests.dashboard.test_external_runs import TokenClient, new_run
from trainer.importers import trackio as convert

pytestmark = pytest.mark.django_db


def entry(metrics, step=1, run="r1", **extra):
    return {"project": "proj", "run": run, "run_id": f"id-{run}", "metrics": metrics,
            "step": step, "log_id": uuid.uuid4().hex, **extra}  # fmt: skip


def table(n):
    rows = [{"prompt": f"p{i % 7}", "completion": "c", "r1": 1.0, "step": 1}
            for i in range(n)]  # fmt: skip
    return {"_type": "trackio.table", "_value": rows}


def test_a_call_reporting_to_more_runs_than_the_limit_is_refused(bulk_log, settings):
    settings.TRACKIO_MAX_RUNS = 3
    answer = bulk_log(*(entry({"loss": 1.0}, run=f"r{i}") for i in range(4)))
    assert "4 runs" in answer["error"] and "TRACKIO_MAX_RUNS" in answer["error"]
    assert Run.objects.count() == 0
    assert (
        bulk_log(*(entry({"loss": 1.0}, run=f"r{i}") for i in range(3)))["error"]
        is None
    )
    assert Run.objects.count() == 3


def test_a_call_with_more_metric_values_than_the_limit_is_refused(bulk_log, settings):
    settings.EVENTS_MAX_METRIC_VALUES = 1024
    many = {f"k{j}": 1.0 for j in range(600)}
    answer = bulk_log(entry(many, step=1), entry(many, step=2))
    assert "1,200 metric values" in answer["error"]
    assert "EVENTS_MAX_METRIC_VALUES" in answer["error"]
    assert MetricPoint.objects.count() == 0


def test_a_table_past_the_trajectory_limit_is_refused_and_one_within_it_stored(
    bulk_log, settings
):
    settings.TRACKIO_MAX_TRAJECTORIES = 100
    answer = bulk_log(entry({"completions": table(101)}))
    assert "101 table rows" in answer["error"]
    assert "TRACKIO_MAX_TRAJECTORIES" in answer["error"]
    assert Trajectory.objects.count() == 0
    assert bulk_log(entry({"completions": table(100)}))["error"] is None
    # grouped by prompt, each group's rollouts numbered from 0
    rows = Trajectory.objects.values_list("group", "index", "task_id")
    by_group: dict[int, list[int]] = {}
    for group, index, _ in rows:
        by_group.setdefault(group, []).append(index)
    assert set(by_group) <= set(range(7))  # the groups the recording policy kept
    assert all(sorted(v) == list(range(len(v))) for v in by_group.values())


def test_placing_a_tables_rows_beside_stored_ones_matches_the_rescanning_rule():
    """The indexed placement gives what rescanning every placed row gave: a
    prompt's first group, else a new group past the highest; the next index."""
    taken = {1: convert.Slots([(0, 0, "a"), (0, 1, "a"), (3, 0, "b")])}
    events = [
        {"type": "trajectory", "step": 1, "group": None, "index": None, "task_id": t}
        for t in ("a", "c", "b", "c", "a")
    ]
    events.append({"type": "trajectory", "step": 2, "group": None, "index": None,
                   "task_id": "a"})  # fmt: skip
    placed = [(e["group"], e["index"]) for e in convert.place(events, taken)]
    assert placed == [(0, 2), (4, 0), (3, 1), (4, 1), (0, 3), (0, 0)]


def test_entries_without_a_step_in_one_call_each_get_the_next_step(bulk_log):
    logs = [entry({"loss": float(i)}, step=None) for i in range(3)]
    answer = bulk_log(*logs)
    assert answer["error"] is None, answer
    points = MetricPoint.objects.filter(key="loss").order_by("step")
    assert [(p.step, p.value) for p in points] == [(1, 0.0), (2, 1.0), (3, 2.0)]


def test_rewards_summing_past_the_float_range_are_stored_as_inf(bulk_log):
    rows = [{"prompt": "a", "completion": "b", "r1": 1e308, "r2": 1e308, "step": 1}]
    answer = bulk_log(entry({"completions": {"_type": "trackio.table", "_value": rows}},
                            config={"reward_weights": [1e308, "x", None]}))  # fmt: skip
    assert answer["error"] is None, answer
    assert math.isinf(Trajectory.objects.get().reward or math.inf)


def test_an_events_body_with_more_metric_values_than_the_limit_is_a_413(
    owner, settings
):
    settings.EVENTS_MAX_METRIC_VALUES = 1024
    api = TokenClient(tokens.do_create_token(owner, "x")[1])
    run_id = new_run(api)
    many = {f"k{j}": 1.0 for j in range(600)}
    events = [{"type": "step", "step": s, "metrics": many} for s in (1, 2)]
    r = api.post_events(run_id, events)
    assert r.status_code == 413, r.content
    assert "EVENTS_MAX_METRIC_VALUES" in r.content.decode()
    assert MetricPoint.objects.count() == 0
    assert api.post_events(run_id, events[:1]).status_code == 200


def test_an_events_body_is_refused_at_the_line_past_the_metric_limit(
    owner, settings, monkeypatch
):
    """The count stops the parse where it passes the limit: the lines after it are
    never parsed (a body of 990,000 values unfolded into ~150 MB before the count)."""
    from dashboard.runs import event_body

    settings.EVENTS_MAX_METRIC_VALUES = 1024
    api = TokenClient(tokens.do_create_token(owner, "x")[1])
    run_id = new_run(api)
    parsed = []
    real = event_body._event
    monkeypatch.setattr(
        event_body, "_event", lambda line: parsed.append(1) or real(line)
    )
    many = {f"k{j}": 1.0 for j in range(600)}
    events = [{"type": "step", "step": s, "metrics": many} for s in range(1, 9)]
    r = api.post_events(run_id, events)
    assert r.status_code == 413, r.content
    assert "body (by line 2): 1,200+ metric values" in r.content.decode()
    assert len(parsed) == 2 and MetricPoint.objects.count() == 0
