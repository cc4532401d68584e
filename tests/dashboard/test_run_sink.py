from __future__ import annotations

import math
import uuid

import pytest
from fake_runner import events_for_step, metrics_for

from dashboard.models import (
    Alert,
    Checkpoint,
    GroupPrompt,
    Judgement,
    MetricPoint,
    Run,
    Trajectory,
)
from dashboard.reads import metrics, trajectories
from dashboard.runs import lease, services
from dashboard.runs.sinks import RunSink

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def claim(owner, tiny_config, enqueued):
    run = services.launch_run(owner, tiny_config)
    return lease.claim(run.id)


def emit_steps(sink, steps, seed=3):
    for step in steps:
        for event in events_for_step(seed, step):
            sink.emit(event)


def metric_rows(run_id):
    return list(
        MetricPoint.objects.filter(run_id=run_id)
        .order_by("step", "key")
        .values_list("step", "key", "value")
    )


def test_every_event_lands_once_and_re_emitting_overwrites(claim, published):
    sink = RunSink(claim, interval_s=0.01)
    emit_steps(sink, range(1, 7))
    emit_steps(sink, range(4, 7))  # a replay: same keys, same values
    sink.close()
    rows = metric_rows(claim.run_id)
    assert len(rows) == 6 * len(metrics_for(3, 1))
    assert len({(s, k) for s, k, _ in rows}) == len(rows)
    assert Trajectory.objects.filter(run_id=claim.run_id).count() == 12
    assert Judgement.objects.filter(run_id=claim.run_id).count() == 12
    assert Alert.objects.filter(run_id=claim.run_id).count() == 2  # steps 3 and 6
    assert Run.objects.get(pk=claim.run_id).last_step == 6
    assert sink.rows_written > 0 and not sink.lost


def test_a_restarted_attempt_supersedes_rows_from_its_start_step(claim, published):
    sink = RunSink(claim, interval_s=0.01)
    emit_steps(sink, range(1, 7))
    sink.emit({"type": "run_started", "start_step": 4})
    emit_steps(sink, range(4, 6))
    sink.close()
    steps = set(
        MetricPoint.objects.filter(run_id=claim.run_id).values_list("step", flat=True)
    )
    assert steps == {1, 2, 3, 4, 5}
    assert set(
        Trajectory.objects.filter(run_id=claim.run_id).values_list("step", flat=True)
    ) == {1, 2, 3, 4, 5}
    assert Run.objects.get(pk=claim.run_id).last_step == 5


def test_non_finite_values_are_stored_and_read_back_safely(claim, published):
    sink = RunSink(claim, interval_s=0.01)
    emit_steps(sink, range(1, 6))
    sink.close()
    values = {(s, k): v for s, k, v in metric_rows(claim.run_id)}
    assert math.isnan(values[(2, "kl")])  # on SQLite too (ExactFloatField)
    assert values[(4, "grad_norm")] == math.inf
    run = Run.objects.get(pk=claim.run_id)
    series = metrics.downsample_metrics(run, ["kl", "grad_norm"], points=100)["series"]
    assert series["kl"]["last"][1] == "NaN"
    assert series["grad_norm"]["max"][3] == "Infinity"


def test_token_arrays_round_trip_and_text_is_sanitised(claim, published):
    sink = RunSink(claim, interval_s=0.01)
    emit_steps(sink, [1])
    sink.close()
    t = Trajectory.objects.get(run_id=claim.run_id, step=1, group=0, index=1)
    segs = trajectories.trajectory_detail(t)["segments"]
    original = events_for_step(3, 1)[3]["segments"]  # the index=1 trajectory
    assert [s["token_ids"] for s in segs] == [s["token_ids"] for s in original]
    assert segs[0]["logprob"] == ["NaN"] * 3
    assert segs[1]["logprob"] == pytest.approx(original[1]["logprob"])
    assert segs[1]["advantage"] == pytest.approx(original[1]["advantage"], rel=1e-6)
    assert "\x00" not in segs[1]["text"] and segs[1]["text"].startswith("<b>answer</b>")
    # The 3-token prompt the group's rollouts share is stored once, beside them.
    assert t.shared_prompt and len(t.arrays) == 24 * 4
    prompt = GroupPrompt.objects.get(run_id=claim.run_id, step=1, group=0)
    assert len(prompt.arrays) == 24 * 3


def test_checkpoint_returns_only_once_everything_before_it_is_committed(
    claim, published
):
    sink = RunSink(claim, interval_s=60)  # no periodic flush: only the sync one
    emit_steps(sink, [1, 2])
    sink.emit({"type": "checkpoint", "step": 2, "path": "/tmp/x"})
    assert Checkpoint.objects.filter(run_id=claim.run_id, step=2).exists()
    assert MetricPoint.objects.filter(run_id=claim.run_id, step=2).count() == len(
        metrics_for(3, 2)
    )
    sink.close()


def test_frames_are_coalesced_numbered_and_sent_after_commit(claim, monkeypatch):
    from dashboard.live import streaming

    seen = []

    def publish(run_id, text):
        import json

        frame = json.loads(text)
        # Runs in the writer thread after the commit: the rows must be visible.
        steps = [s["step"] for s in frame["steps"]]
        if steps:
            assert MetricPoint.objects.filter(run_id=run_id, step=max(steps)).exists()
        seen.append(frame)
        return True

    monkeypatch.setattr(streaming, "publish", publish)
    sink = RunSink(claim, interval_s=0.05)
    emit_steps(sink, range(1, 41))
    sink.close()
    assert 1 <= len(seen) < 40
    seqs = [f["seq"] for f in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    got = sorted(s["step"] for f in seen for s in f["steps"])
    assert got == list(range(1, 41))
    assert any(
        m["kl"] == "NaN" for f in seen for s in f["steps"] for m in [s["metrics"]]
    )
    assert Run.objects.get(pk=claim.run_id).frame_seq == seqs[-1]


def test_a_lost_lease_stops_all_writes(claim, published):
    sink = RunSink(claim, interval_s=0.01)
    emit_steps(sink, [1])
    sink.flush()
    Run.objects.filter(pk=claim.run_id).update(
        lease=uuid.uuid4()
    )  # someone else took over
    emit_steps(sink, [2, 3])
    sink.close()
    assert sink.lost
    assert set(
        MetricPoint.objects.filter(run_id=claim.run_id).values_list("step", flat=True)
    ) == {1}
    assert lease.should_stop(claim)


def test_hostile_strings_and_shapes_are_stored_not_fatal(claim, published):
    sink = RunSink(claim, interval_s=0.01)
    sink.emit(
        {
            "type": "step",
            "step": 1,
            "metrics": {"ok": 1.0, "bad\ud800key": "x", "k" * 500: 2.0},
        }
    )
    sink.emit(
        {
            "type": "trajectory",
            "step": 1,
            "group": "g",
            "index": None,
            "segments": [{"tokens": ["\ud800", 3]}, "junk"],
        }
    )
    sink.emit(
        {
            "type": "alert",
            "step": 1,
            "detector": "d",
            "message": "\x00" * 5,
            "evidence": {"x": [float("nan")]},
        }
    )
    sink.emit({"type": "judgement", "step": 2**40, "judge": "j", "score": "high"})
    sink.emit("not an event")
    sink.close()
    keys = set(
        MetricPoint.objects.filter(run_id=claim.run_id).values_list("key", flat=True)
    )
    assert "ok" in keys and "bad?key" in keys and "k" * 200 in keys
    assert Trajectory.objects.filter(run_id=claim.run_id).count() == 1
    assert Alert.objects.get(run_id=claim.run_id).evidence == {"x": ["NaN"]}
    assert sink.dropped_batches == 0
