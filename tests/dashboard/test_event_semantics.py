"""Event semantics as documented (issue 21, item 6). The first write wins: a re-sent
event never overwrites what is stored, and one that differs is reported as a
conflict, on PostgreSQL and on SQLite. A finished run refuses new events (409) until
its owner reopens it; a retry of what it already holds is answered as before."""

from __future__ import annotations

import math

import pytest
from test_external_runs import TokenClient, new_run

from dashboard.ingest import writer
from dashboard.ingest.conflicts import Outcome
from dashboard.models import (
    ROLLUP_SHIFTS,
    Judgement,
    MetricPoint,
    MetricRollup,
    Run,
    Trajectory,
)
from dashboard.site import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "test")[1])


def _step(step, **metrics):
    return {"type": "step", "step": step, "metrics": metrics}


def _traj(step, index, reward):
    return {
        "type": "trajectory",
        "step": step,
        "group": 0,
        "index": index,
        "reward": reward,
        "advantage": 0.0,
        "num_turns": 1,
        "length": 3,
        "segments": [{"kind": "action", "text": f"answer {index}"}],
    }


def _value(run_id, key, step=1):
    return MetricPoint.objects.get(run_id=run_id, key=key, step=step).value


def test_a_re_sent_step_with_another_value_keeps_the_first_and_says_so(api):
    run_id = new_run(api)
    assert api.post_events(run_id, [_step(1, loss=1.0)]).json()["accepted"] == 1
    r = api.post_events(run_id, [_step(1, loss=2.0, kl=0.5), _step(2, loss=0.5)])
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["accepted"], body["duplicates"], body["conflicts"]) == (1, 0, 1)
    assert body["conflicting"] == [
        {"type": "step", "step": 1, "key": "loss", "stored": 1.0, "sent": 2.0}
    ]
    assert _value(run_id, "loss") == 1.0  # first write wins
    assert _value(run_id, "kl") == 0.5  # the new key of the re-sent step is stored
    # The rollups never saw the refused 2.0: every level's bucket of steps 1-2 holds
    # the max 1.0 (step 1) and the min 0.5 (step 2).
    levels = MetricRollup.objects.filter(run_id=run_id, key="loss", bucket=0)
    assert [(r.vmax, r.vmin) for r in levels] == [(1.0, 0.5)] * len(ROLLUP_SHIFTS)


def test_the_same_value_again_is_a_duplicate_not_a_conflict_nan_included(api):
    run_id = new_run(api)
    first = [_step(1, loss=1.0, gnorm="NaN", top="Infinity")]
    assert api.post_events(run_id, first).json()["accepted"] == 1
    body = api.post_events(run_id, first).json()
    assert (body["accepted"], body["duplicates"], body["conflicts"]) == (0, 1, 0)
    assert math.isnan(_value(run_id, "gnorm"))


def test_non_finite_conflicts_are_reported_as_json_safe_strings(api):
    run_id = new_run(api)
    api.post_events(run_id, [_step(1, loss="NaN")])
    body = api.post_events(run_id, [_step(1, loss="-Infinity")]).json()
    assert body["conflicting"] == [
        {"type": "step", "step": 1, "key": "loss", "stored": "NaN", "sent": "-Infinity"}
    ]


def test_two_values_for_one_key_in_one_batch_keep_the_first(api):
    run_id = new_run(api)
    body = api.post_events(run_id, [_step(1, loss=1.0), _step(1, loss=9.0)]).json()
    assert (body["accepted"], body["conflicts"]) == (1, 1)  # the second conflicts
    assert body["conflicting"][0]["stored"] == 1.0
    assert body["conflicting"][0]["sent"] == 9.0
    assert _value(run_id, "loss") == 1.0


def test_a_re_sent_trajectory_with_another_reward_keeps_the_first(api):
    run_id = new_run(api)
    api.post_events(run_id, [_traj(1, 0, 1.0), _traj(1, 1, 0.0)])
    body = api.post_events(run_id, [_traj(1, 0, 0.25), _traj(1, 1, 0.0)]).json()
    assert (body["accepted"], body["duplicates"], body["conflicts"]) == (0, 1, 1)
    assert body["conflicting"] == [
        {
            "type": "trajectory",
            "step": 1,
            "group": 0,
            "index": 0,
            "stored": {"reward": 1.0},
            "sent": {"reward": 0.25},
        }
    ]
    assert Trajectory.objects.get(run_id=run_id, index=0).reward == 1.0
    assert Trajectory.objects.filter(run_id=run_id).count() == 2


def test_a_re_sent_judgement_with_another_score_is_a_conflict(api):
    run_id = new_run(api)
    judged = {
        "type": "judgement",
        "step": 1,
        "group": 0,
        "index": 0,
        "judge": "rubric",
        "backend": "scripted",
        "score": 0.5,
        "rationale": "ok",
    }
    api.post_events(run_id, [judged])
    body = api.post_events(run_id, [{**judged, "score": 0.9}]).json()
    assert body["conflicts"] == 1
    assert Judgement.objects.get(run_id=run_id).score == 0.5


def test_only_the_first_differences_are_described(api):
    run_id = new_run(api)
    many = {f"m{i}": 1.0 for i in range(50)}
    api.post_events(run_id, [_step(1, **many)])
    body = api.post_events(run_id, [_step(1, **{k: 2.0 for k in many})]).json()
    assert body["conflicts"] == 1  # one event
    assert len(body["conflicting"]) == 20


def test_the_sqlite_path_finds_the_same_conflicts_as_postgresql(owner):
    """The embedded default's query path, called directly on the test database (on
    PostgreSQL too, so both paths are compared in one run)."""
    run = Run.objects.create(owner=owner, name="r", config={}, external=True)
    writer.insert_metrics(run.pk, {(1, "a"): 1.0, (2, "a"): math.nan})
    sent = {(1, "a"): 5.0, (2, "a"): math.nan, (2, "b"): 0.5, (3, "a"): 3.0}
    py = Outcome()
    writer._insert_metrics_py(run.pk, sent, py)
    assert py.stale_steps == {1} and py.count == 1  # step 1 held nothing new
    assert py.shown == [
        {"type": "step", "step": 1, "key": "a", "stored": 1.0, "sent": 5.0}
    ]
    assert MetricPoint.objects.get(run=run, step=1, key="a").value == 1.0
    assert MetricPoint.objects.filter(run=run).count() == 4


def test_our_trainers_resumed_attempt_still_replaces_the_replayed_steps(owner):
    """First-write-wins is about re-sends: a resumed attempt (``run_started`` with a
    ``start_step``) deletes the steps it replays first, so its values are stored."""
    run = Run.objects.create(owner=owner, name="r", config={})
    writer.store(run.pk, [_step(1, loss=1.0), _step(2, loss=2.0)])
    found = Outcome()
    writer.store(
        run.pk,
        [{"type": "run_started", "start_step": 2, "config": {}}, _step(2, loss=7.0)],
        outcome=found,
    )
    assert found.count == 0
    assert _value(run.pk, "loss", 2) == 7.0 and _value(run.pk, "loss", 1) == 1.0


def _finished_run(api):
    run_id = new_run(api)
    batch = [_step(1, loss=1.0), {"type": "run_finished", "status": "succeeded"}]
    assert api.post_events(run_id, batch).json()["accepted"] == 2
    return run_id, batch


def test_a_finished_run_refuses_new_events_and_stores_none_of_the_batch(api):
    run_id, _ = _finished_run(api)
    r = api.post_events(run_id, [_step(1, loss=1.0), _step(2, loss=2.0)])
    assert r.status_code == 409, r.content
    assert "finished as succeeded" in r.json()["detail"]
    assert f"/api/runs/{run_id}/reopen" in r.json()["detail"]
    assert not MetricPoint.objects.filter(run_id=run_id, step=2).exists()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.last_step) == ("succeeded", 1)


def test_a_finish_event_with_another_status_cannot_flip_a_finished_run(api):
    run_id, _ = _finished_run(api)
    r = api.post_events(run_id, [{"type": "run_finished", "status": "failed"}])
    assert r.status_code == 409
    assert Run.objects.get(pk=run_id).status == "succeeded"


def test_a_retry_of_what_a_finished_run_holds_is_answered_as_duplicates(api):
    """A client that did not hear the answer to its last batch sends it again."""
    run_id, batch = _finished_run(api)
    r = api.post_events(run_id, [{"type": "run_started", "config": {}}, *batch])
    assert r.status_code == 200, r.content
    assert r.json()["duplicates"] == 2


def test_the_owner_reopens_a_finished_run_and_it_takes_events_again(api):
    run_id, _ = _finished_run(api)
    r = api.post_json(f"/api/runs/{run_id}/reopen", {})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "running"
    run = Run.objects.get(pk=run_id)
    assert run.finished_at is None and run.status == "running"
    assert api.post_events(run_id, [_step(2, loss=2.0)]).json()["accepted"] == 1
    again = api.post_json(f"/api/runs/{run_id}/reopen", {})  # running: unchanged
    assert again.status_code == 200 and again.json()["status"] == "running"


def test_only_the_owner_may_reopen_staff_included(api, staff):
    run_id, _ = _finished_run(api)
    staff_api = TokenClient(tokens.do_create_token(staff, "staff")[1])
    r = staff_api.post_json(f"/api/runs/{run_id}/reopen", {})
    assert r.status_code == 403 and "owner" in r.json()["detail"]
    assert Run.objects.get(pk=run_id).status == "succeeded"


def test_reopen_is_for_external_runs_only(owner, tiny_config, enqueued):
    from dashboard.runs import services

    run = services.launch_run(owner, tiny_config)
    mine = TokenClient(tokens.do_create_token(owner, "t")[1])
    assert mine.post_json(f"/api/runs/{run.id}/reopen", {}).status_code == 409
