"""Tinker cookbook's ``log_path`` -> our events (checked against
thinking-machines-lab/tinker-cookbook at 9dfcc3a).

* ``metrics.jsonl``: ``TrainingRunStore.write_metrics``
  (tinker_cookbook/stores/training_store.py, through ``ml_log.JsonLogger``) appends
  ``{"step": i_batch, name: value, ...}`` per ``log_metrics`` call.
* ``config.json``: the training config (``write_config``), sent as the run's config.
* ``iteration_<NNNNNN>/train_rollout_summaries.jsonl``: ``serialize_rollout_summaries``
  (tinker_cookbook/rl/rollout_logging.py) writes one record per trajectory:
  ``schema_version`` (1), ``split``, ``iteration``, ``group_idx``, ``traj_idx``,
  ``tags``, ``sampling_client_step``, ``total_reward``, ``final_reward``,
  ``trajectory_metrics``, ``final_ob_len`` and ``steps`` (``step_idx``, ``ob_len``,
  ``ac_len``, ``reward``, ``episode_done``, ``metrics``, ``logs``).

Summaries carry no text and no tokens (the transcripts are in ``*_logtree.json``,
an HTML-oriented tree not imported here), so a trajectory's segments are one empty
``prompt`` and one empty ``action`` segment per transition, the counts in ``facts``.
Its advantage is Tinker's own (``rl/data_processing.py`` ``compute_advantages``:
the total reward minus the group mean, not divided by a std). Staleness per
trajectory is ``iteration - sampling_client_step`` (async runs) and its step mean
and max become ``off_policy/staleness`` and ``off_policy/staleness_max``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from trainer.importers.shapes import (
    TrajectoryRow,
    step_events,
    text_segment,
    trajectory_event,
)
from trainer.importers.tailing import BadImportFile, JsonlTail, Settled, read_jsonl_file

ITERATION = re.compile(r"iteration_(\d+)$")
SUMMARIES = "train_rollout_summaries.jsonl"


def _num(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan


def summary_row(record: dict[str, Any], advantage: float) -> TrajectoryRow:
    steps = [s for s in record.get("steps") or [] if isinstance(s, dict)]
    segments = []
    for turn in range(len(steps)):
        for kind in ("prompt", "action"):
            seg = text_segment(kind, "")
            seg["turn"] = turn
            segments.append(seg)
    iteration = int(record["iteration"])
    sampled_at = record.get("sampling_client_step")
    metrics = {
        k: float(v)
        for k, v in (record.get("trajectory_metrics") or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    if isinstance(sampled_at, int):
        metrics["off_policy/staleness"] = float(iteration - sampled_at)
    tags = [str(t) for t in record.get("tags") or []]
    return TrajectoryRow(
        step=iteration,
        group=int(record["group_idx"]),
        index=int(record["traj_idx"]),
        prompt="",
        segments=segments,
        reward=_num(record.get("total_reward")),
        advantage=advantage,
        components={"final_reward": _num(record.get("final_reward"))},
        task_id=f"tinker-{'-'.join(tags)}-{iteration}-{record['group_idx']}"[:200],
        length=sum(int(s.get("ac_len") or 0) for s in steps),
        num_turns=len(steps),
        facts={
            "source": "tinker",
            "split": record.get("split"),
            "tags": tags,
            "sampling_client_step": sampled_at,
            "final_ob_len": record.get("final_ob_len"),
            "steps": [
                {k: s.get(k) for k in ("ob_len", "ac_len", "episode_done", "logs")}
                for s in steps
            ],
        },
        metrics=metrics,
        per_step={"reward": [_num(s.get("reward")) for s in steps]},
    )


def summary_events(records: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    for n, record in enumerate(records, start=1):
        for key in ("iteration", "group_idx", "traj_idx"):
            if not isinstance(record.get(key), int):
                raise BadImportFile(f"{path}: line {n}: {key}: must be an integer")
    groups: dict[int, list[float]] = {}
    for record in records:
        groups.setdefault(record["group_idx"], []).append(
            _num(record.get("total_reward"))
        )
    means = {g: sum(v) / len(v) for g, v in groups.items()}
    return [
        trajectory_event(
            summary_row(r, _num(r.get("total_reward")) - means[r["group_idx"]])
        )
        for r in records
    ]


def staleness_metrics(events: list[dict[str, Any]]) -> dict[str, float]:
    values = [
        e["metrics"]["off_policy/staleness"]
        for e in events
        if "off_policy/staleness" in e["metrics"]
    ]
    if not values:
        return {}
    return {
        "off_policy/staleness": sum(values) / len(values),
        "off_policy/staleness_max": max(values),
    }


class TinkerReader:
    """Reads a Tinker cookbook ``log_path``; :meth:`poll` returns events not
    returned before, so calling it repeatedly tails a live run."""

    framework = "tinker"

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)
        self.last_step = 0
        self._metrics = JsonlTail(self.log_path / "metrics.jsonl")
        self._files = Settled()
        self._derived: dict[int, dict[str, float]] = {}

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"source": "tinker", "log_path": str(self.log_path)}
        path = self.log_path / "config.json"
        if path.is_file():
            try:
                config["tinker"] = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise BadImportFile(f"{path}: not JSON: {exc}") from None
        return config

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        events = self._summaries(settle)
        rows = [
            (r["step"], {k: v for k, v in r.items() if k != "step"})
            for r in self._metrics.read()
            if isinstance(r.get("step"), int)
        ]
        derived = {s: self._derived.pop(s) for s, _ in rows if s in self._derived}
        events += step_events(self.framework, rows, derived)
        for event in events:
            self.last_step = max(self.last_step, event["step"])
        return events

    def flush(self) -> list[dict[str, Any]]:
        """Derived staleness of iterations that had no metrics line."""
        out = [
            {"type": "step", "step": s, "metrics": m}
            for s, m in sorted(self._derived.items())
        ]
        self._derived.clear()
        return out

    def _summaries(self, settle: bool) -> list[dict[str, Any]]:
        found = {}
        for path in self.log_path.glob("iteration_*"):
            if match := ITERATION.search(path.name):
                found[int(match.group(1))] = path / SUMMARIES
        out = []
        for iteration, file in sorted(found.items()):
            if not self._files.ready(file, settle=settle):
                continue
            records = read_jsonl_file(file)
            if records is None:
                continue
            self._files.take(file)
            events = summary_events(records, file)
            if metrics := staleness_metrics(events):
                self._derived[iteration] = metrics
            out += events
        return out
