"""HttpSink against a fake dashboard: order, exactly-once, outages, spool, 413, 400, 401."""

from __future__ import annotations

import json
import logging

from fake_dashboard import TOKEN, wait_until

from trainer.events import JsonlSink, TeeSink
from trainer.httpsink import HttpSink
from trainer.spool import Spool, spool_files

FAST = {"flush_interval_s": 0.02, "backoff_base_s": 0.01, "backoff_max_s": 0.05}


def step_event(step: int, reward: float = 0.5) -> dict:
    return {"type": "step", "step": step, "metrics": {"reward": reward, "kl": 0.01}}


def spooled(directory) -> list[dict]:
    lines = []
    for path in spool_files(directory):
        lines += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return lines


def test_it_delivers_every_event_once_in_order_across_an_outage(dash, tmp_path):
    sink = HttpSink(
        dash.url, TOKEN, spool_dir=tmp_path / "spool", batch_events=4, **FAST
    )
    tee = TeeSink(JsonlSink(tmp_path / "events.jsonl"), sink)
    tee.emit({"type": "run_started", "config": {}, "start_step": 0})
    for step in range(1, 21):
        tee.emit(step_event(step, reward=float("nan") if step == 3 else 0.5))
    wait_until(lambda: len(dash.store.runs) == 1, "the run to be created")
    dash.stop()
    for step in range(21, 51):
        tee.emit(step_event(step))
    wait_until(lambda: sink.stats["retries"] > 0, "a failed send during the outage")
    dash.start()  # the same port: the dashboard comes back
    for step in range(51, 71):
        tee.emit(step_event(step))
    tee.emit({"type": "run_finished", "status": "succeeded", "step": 70, "error": None})
    tee.close()

    saved = [
        json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()
    ]
    assert dash.events() == saved
    assert len(saved) == 72 and saved[3]["metrics"]["reward"] == "NaN"
    assert dash.only_run()["status"] == "succeeded"
    assert spool_files(tmp_path / "spool") == []


def test_a_dashboard_down_from_the_start_gets_the_spool_replayed_in_order(
    dash, tmp_path
):
    dash.stop()
    sink = HttpSink(dash.url, TOKEN, spool_dir=tmp_path / "spool", **FAST)
    events = [step_event(step) for step in range(1, 11)]
    for event in events:
        sink.emit(event)
    wait_until(lambda: len(spooled(tmp_path / "spool")) == 10, "events on disk")
    assert spooled(tmp_path / "spool") == events
    dash.start()
    sink.close(timeout=30)
    assert dash.events() == events
    assert spool_files(tmp_path / "spool") == []


def test_it_splits_a_batch_the_server_finds_too_large(dash, tmp_path):
    dash.max_lines = 3
    sink = HttpSink(
        dash.url, TOKEN, spool_dir=tmp_path, batch_events=10, flush_interval_s=60
    )
    events = [step_event(step) for step in range(1, 11)]
    for event in events:
        sink.emit(event)
    sink.close(timeout=30)
    assert dash.events() == events
    sizes = [n for path, n, status in dash.store.requests if path.endswith("/events")]
    statuses = [s for path, n, s in dash.store.requests if path.endswith("/events")]
    assert sizes[0] == 10 and statuses[0] == 413
    assert max(n for n, s in zip(sizes, statuses, strict=True) if s == 200) <= 3


def test_on_401_it_stops_keeps_every_event_on_disk_and_says_where(
    dash, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="trainer.httpsink")
    sink = HttpSink(dash.url, "wrong-token", spool_dir=tmp_path / "spool", **FAST)
    events = [step_event(step) for step in range(1, 6)]
    for event in events[:2]:
        sink.emit(event)
    wait_until(lambda: sink.error is not None, "the refusal")
    for event in events[2:]:
        sink.emit(event)
    sink.close(timeout=30)
    assert "401" in sink.error
    assert "401" in caplog.text and str(tmp_path / "spool") in caplog.text
    assert spooled(tmp_path / "spool") == events
    assert dash.store.runs == {}
    # A later sink with a good token on the same spool sends them, in order.
    HttpSink(dash.url, TOKEN, spool_dir=tmp_path / "spool", **FAST).close(timeout=30)
    assert dash.events() == events


def test_on_400_it_saves_the_rejected_batch_logs_the_errors_and_goes_on(
    dash, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="trainer.httpsink")
    sink = HttpSink(dash.url, TOKEN, spool_dir=tmp_path, batch_events=1, **FAST)
    bad = {"type": "step", "step": "three", "metrics": {}}
    for event in (step_event(1), bad, step_event(2)):
        sink.emit(event)
    sink.close(timeout=30)
    assert dash.events() == [step_event(1), step_event(2)]
    (rejected,) = tmp_path.glob("rejected-*.jsonl")
    assert [json.loads(x) for x in rejected.read_text().splitlines()] == [bad]
    assert "line 1: step: Input should be a valid integer" in caplog.text
    assert sink.stats["rejected"] == 1


def test_it_retries_a_503_and_stores_nothing_twice(dash, tmp_path):
    dash.fail(503, times=3)
    sink = HttpSink(dash.url, TOKEN, spool_dir=tmp_path, batch_events=2, **FAST)
    events = [step_event(step) for step in range(1, 8)]
    for event in events:
        sink.emit(event)
    sink.close(timeout=30)
    assert dash.events() == events
    assert sink.stats["retries"] >= 3


def test_memory_stays_bounded_while_the_dashboard_is_down(dash, tmp_path):
    dash.stop()
    limit, batch = 2_000, 500
    sink = HttpSink(
        dash.url,
        TOKEN,
        spool_dir=tmp_path / "spool",
        max_buffer_bytes=limit,
        batch_bytes=batch,
        **FAST,
    )
    events = [step_event(step) for step in range(1, 201)]  # ~70 bytes each
    peak = 0
    for event in events:
        sink.emit(event)
        peak = max(peak, sink.buffered_bytes)
    assert peak <= limit + batch
    assert len(spooled(tmp_path / "spool")) >= 200 - (limit + batch) // 60
    dash.start()
    sink.close(timeout=60)
    assert dash.events() == events


def test_close_flushes_what_is_still_buffered(dash, tmp_path):
    sink = HttpSink(dash.url, TOKEN, spool_dir=tmp_path, flush_interval_s=3600)
    events = [step_event(step) for step in range(1, 8)]
    for event in events:
        sink.emit(event)
    sink.close(timeout=30)
    assert dash.events() == events


def test_close_gives_up_after_its_timeout_and_leaves_the_rest_spooled(
    dash, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="trainer.httpsink")
    dash.fail(503, times=None)
    sink = HttpSink(dash.url, TOKEN, spool_dir=tmp_path, **FAST)
    events = [step_event(step) for step in range(1, 6)]
    for event in events:
        sink.emit(event)
    sink.close(timeout=0.3)
    assert spooled(tmp_path) == events
    assert "5 events were not delivered" in caplog.text and str(tmp_path) in caplog.text


def test_it_reports_into_a_given_run_and_tells_the_id_of_a_created_one(dash, tmp_path):
    seen = []
    first = HttpSink(
        dash.url, TOKEN, name="n1", spool_dir=tmp_path, on_run_id=seen.append, **FAST
    )
    first.emit(step_event(1))
    first.close(timeout=30)
    again = HttpSink(dash.url, TOKEN, seen[0], spool_dir=tmp_path, **FAST)
    again.emit(step_event(2))
    again.close(timeout=30)
    assert list(dash.store.runs) == seen
    assert dash.only_run()["name"] == "n1"
    assert dash.events() == [step_event(1), step_event(2)]


def test_continuing_a_finished_run_reopens_it_before_sending(dash, tmp_path):
    """A resumed trainer (a sink given the run's id) reopens the run first: the
    dashboard refuses new events for a finished run until then."""
    first = HttpSink(dash.url, TOKEN, name="n1", spool_dir=tmp_path / "a", **FAST)
    first.emit(step_event(1))
    first.emit({"type": "run_finished", "status": "succeeded", "step": 1})
    first.close(timeout=30)
    run_id = dash.only_run()["id"]
    assert dash.only_run()["status"] == "succeeded" and dash.store.reopened == []
    again = HttpSink(dash.url, TOKEN, run_id, spool_dir=tmp_path / "b", **FAST)
    again.emit(step_event(2))
    again.close(timeout=30)
    assert dash.store.reopened == [run_id]
    assert dash.events()[-1] == step_event(2) and again.stats["rejected"] == 0
    assert dash.only_run()["status"] == "running"


def test_the_spool_puts_a_batch_back_in_front_of_newer_lines(tmp_path):
    spool = Spool(tmp_path)
    spool.append(["a", "b", "c"])
    lines, offset = spool.read(2, 1 << 20)
    assert lines == ["a", "b"]
    spool.commit(offset)
    spool.prepend(["x", "y"])
    spool.append(["d"])
    out = []
    while spool.pending():
        lines, offset = spool.read(10, 1 << 20)
        out += lines
        spool.commit(offset)
    assert out == ["x", "y", "c", "d"]
    assert spool_files(tmp_path) == []
