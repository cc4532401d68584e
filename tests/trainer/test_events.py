"""Sinks: JSON lines stay strict JSON whatever the numbers are."""

from __future__ import annotations

import json
import math

from trainer.events import JsonlSink, ListSink, NullSink


def test_jsonl_sink_writes_strict_json_with_non_finite_numbers_as_strings(tmp_path):
    sink = JsonlSink(tmp_path / "events.jsonl")
    sink.emit({"type": "step", "step": 1, "metrics": {"kl": math.nan, "x": math.inf}})
    sink.emit(
        {
            "type": "t",
            "arrays": [[0.5, -1.0], [math.nan, 2.0], [1e308, 1e308]],
            "tokens": ["NaN", "ok"],
            "mixed": [1, None, "a", -math.inf],
            "empty": [],
        }
    )
    sink.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    first, second = (json.loads(line, parse_constant=_reject) for line in lines)
    assert first["metrics"] == {"kl": "NaN", "x": "Infinity"}
    assert second["arrays"] == [[0.5, -1.0], ["NaN", 2.0], [1e308, 1e308]]
    assert second["tokens"] == ["NaN", "ok"]
    assert second["mixed"] == [1, None, "a", "-Infinity"] and second["empty"] == []


def test_jsonl_sink_round_trips_finite_events_exactly(tmp_path):
    event = {
        "type": "trajectory",
        "segments": [{"logprob": [None, -0.25, -1e-9], "tokens": ["<bos>", "a"]}],
        "reward": 0.1 + 0.2,
        "text": 'He said "NaN" \u2014 <script>',
    }
    sink = JsonlSink(tmp_path / "events.jsonl")
    sink.emit(event)
    sink.close()
    line = (tmp_path / "events.jsonl").read_text()
    assert json.loads(line, parse_constant=_reject) == event


def test_list_and_null_sinks_keep_or_drop_events():
    kept, dropped = ListSink(), NullSink()
    for sink in (kept, dropped):
        sink.emit({"type": "alert", "step": 3})
        sink.close()
    assert kept.of_type("alert") == [{"type": "alert", "step": 3}]


def _reject(name: str) -> float:
    raise AssertionError(f"non-standard JSON constant {name}")


def test_a_tee_encodes_each_event_once_for_every_sink_that_writes_lines(
    tmp_path, monkeypatch
):
    import trainer.events as events_mod

    calls = []
    real = events_mod.encode_event
    monkeypatch.setattr(
        events_mod, "encode_event", lambda ev: calls.append(1) or real(ev)
    )

    class Lines:
        def __init__(self):
            self.lines = []

        def emit_line(self, line):
            self.lines.append(line)

        def emit(self, event):
            raise AssertionError("a line sink is handed the line")

        def close(self):
            pass

    class Objects:
        def __init__(self):
            self.events = []

        def emit(self, event):
            self.events.append(event)

        def close(self):
            pass

    lines, objects = Lines(), Objects()
    tee = events_mod.TeeSink(events_mod.JsonlSink(tmp_path / "e.jsonl"), objects, lines)
    event = {"type": "step", "step": 1, "metrics": {"reward": float("nan")}}
    tee.emit(event)
    tee.close()
    written = (tmp_path / "e.jsonl").read_text().splitlines()
    assert len(calls) == 1 and written == lines.lines == [real(event)]
    assert objects.events == [event]
