"""verl's files -> our events (checked against ``volcengine/verl`` source).

Rollout dumps: with ``trainer.rollout_data_dir`` set, ``RayPPOTrainer._dump_generations``
(``verl/trainer/ppo/ray_trainer.py``) writes ``<global_step>.jsonl`` per training step,
one line per sample with ``input`` and ``output`` (decoded prompt and response),
``gts`` (ground truth or null), ``score`` (the summed token-level score), ``step``,
and every ``reward_extra_info`` list of the batch's length (e.g. ``acc``, and
``request_id``). The batch may be reordered (``balance_batch``): GRPO siblings are
found by identical ``input``, not by position.

Metrics: the ``file`` logger (``FileLogger`` in ``verl/utils/tracking.py``) appends
``{"step": N, "data": {name: value}}`` per ``log`` call to ``$VERL_FILE_LOGGER_PATH``
or ``$VERL_FILE_LOGGER_ROOT/<project_name>/<experiment_name>.jsonl`` (orjson: NaN is
written as null). Names are kept, and the ones we know also appear under our name.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainer import metric_names
from trainer.importers.shapes import group_by_prompt, grpo_advantages, text_trajectory
from trainer.importers.tailing import JsonlTail, Settled, read_jsonl_file
from trainer.metric_names import VERL

METRIC_NAMES = VERL  # the table lives in trainer.metric_names
BASE_KEYS = ("input", "output", "gts", "score", "step")


def map_metrics(data: dict[str, Any]) -> dict[str, float]:
    """verl's logged values under their own names, plus ours for the ones we know
    (:func:`trainer.metric_names.map_metrics`)."""
    return metric_names.map_metrics("verl", data)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def rollout_events(step: int, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dump file's records -> trajectory events (groups by identical ``input``)."""
    prompts = [str(r.get("input", "")) for r in records]
    places = group_by_prompt(prompts)
    scores = [
        float(r["score"]) if _is_number(r.get("score")) else math.nan for r in records
    ]
    given = [r.get("advantage") for r in records]
    computed = grpo_advantages(scores, [g for g, _ in places])
    events = []
    for row, record in enumerate(records):
        components = {
            k: float(v)
            for k, v in record.items()
            if k not in BASE_KEYS and k != "advantage" and _is_number(v)
        }
        facts = {
            k: v
            for k, v in record.items()
            if k not in BASE_KEYS and k not in components
        }
        if record.get("gts") is not None:
            facts["ground_truth"] = record["gts"]
        group, index = places[row]
        advantage = given[row] if _is_number(given[row]) else computed[row]
        events.append(
            text_trajectory(
                step=int(record["step"]) if _is_number(record.get("step")) else step,
                group=group,
                index=index,
                prompt=prompts[row],
                completion=str(record.get("output", "")),
                reward=scores[row],
                components=components,
                advantage=advantage,
                facts=facts,
            )
        )
    return events


def derived_metrics(events: list[dict[str, Any]]) -> dict[str, float]:
    """Per-step numbers the dump gives and verl's metrics lack: each reward
    component's mean (``rewards/<name>/mean``), ``reward_std`` (mean of the groups'
    std) and ``frac_reward_zero_std``."""
    out: dict[str, float] = {}
    names = sorted({k for e in events for k in e["rewards"]["components"]})
    for name in names:
        vals = [
            e["rewards"]["components"][name]
            for e in events
            if name in e["rewards"]["components"]
        ]
        out[f"rewards/{name}/mean"] = sum(vals) / len(vals)
    groups: dict[int, list[float]] = {}
    for e in events:
        groups.setdefault(e["group"], []).append(e["reward"])
    stds = [_std(v) for v in groups.values() if len(v) > 1]
    if stds:
        out["reward_std"] = sum(stds) / len(stds)
        out["frac_reward_zero_std"] = sum(1.0 for s in stds if s <= 1e-6) / len(stds)
    return out


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


class VerlReader:
    """Reads a verl run's files; :meth:`poll` returns events not returned before, so
    calling it repeatedly tails a live run. A step file is taken once it ends with a
    newline and (when ``settle``) its size did not change since the previous poll:
    verl writes each file in one go, but the writer may still be mid-way."""

    def __init__(
        self, rollout_dir: str | Path, metrics_file: str | Path | None = None
    ) -> None:
        self.rollout_dir = Path(rollout_dir)
        self.metrics_file = Path(metrics_file) if metrics_file else self._find_metrics()
        self.last_step = 0
        self._files = Settled()
        self._tail = JsonlTail(self.metrics_file) if self.metrics_file else None
        self._pending: tuple[int, dict[str, Any]] | None = (
            None  # the newest step's data
        )
        self._derived: dict[int, dict[str, float]] = {}

    def _find_metrics(self) -> Path | None:
        """A file-logger file inside the rollout dir (any ``*.jsonl`` not named by a
        step number whose first line is ``{"step", "data"}``)."""
        for path in sorted(self.rollout_dir.glob("*.jsonl")):
            if path.stem.isdigit():
                continue
            with path.open(encoding="utf-8") as fh:
                first = fh.readline()
            try:
                head = json.loads(first)
            except ValueError:
                continue
            if isinstance(head, dict) and {"step", "data"} <= head.keys():
                return path
        return None

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        return self._rollouts(settle) + self._metrics()

    def flush(self) -> list[dict[str, Any]]:
        """The events held back for completeness: the newest step's metrics and the
        dump-derived metrics of steps that had no metrics line."""
        out = []
        if self._pending is not None:
            out.append(self._step_event(*self._pending))
            self._pending = None
        for step in sorted(self._derived):
            out.append(self._step_event(step, {}))
        return out

    def _rollouts(self, settle: bool) -> list[dict[str, Any]]:
        files = [p for p in self.rollout_dir.glob("*.jsonl") if p.stem.isdigit()]
        out = []
        for path in sorted(files, key=lambda p: int(p.stem)):
            if not self._files.ready(path, settle=settle):
                continue
            records = read_jsonl_file(path)
            if records is None:
                continue  # the last line is still being written
            events = rollout_events(int(path.stem), records)
            self._files.take(path)
            if events:
                step = events[0]["step"]
                self._derived[step] = derived_metrics(events)
                self.last_step = max(self.last_step, step)
            out += events
        return out

    def _metrics(self) -> list[dict[str, Any]]:
        if self._tail is None:
            return []
        out = []
        for entry in self._tail.read():
            step, data = int(entry["step"]), dict(entry.get("data") or {})
            if self._pending is not None and self._pending[0] != step:
                out.append(self._step_event(*self._pending))
                self._pending = None
            if self._pending is None:
                self._pending = (step, data)
            else:  # a second log call for the same step: one step event
                self._pending[1].update(data)
        return out

    def _step_event(self, step: int, data: dict[str, Any]) -> dict[str, Any]:
        metrics = self._derived.pop(step, {})
        metrics.update(map_metrics(data))
        self.last_step = max(self.last_step, step)
        return {"type": "step", "step": step, "metrics": metrics}
