"""Events as rows: the model rows a trainer event becomes, gathered per batch.

:class:`Batch` keys each row by its table's unique key (run, step, then key,
group/index, judge or detector); :mod:`dashboard.ingest.writer` writes a batch. Every
string is bounded and repaired (:mod:`dashboard.jsonsafe`) on the way in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dashboard import jsonsafe
from dashboard.ingest import arrays, bounds, conflicts, fields, prompts
from dashboard.jsonsafe import as_int
from dashboard.models import Alert, Checkpoint, CriticalPath, Judgement, Trajectory

_KEY_LIMIT = 200


def _float_or_none(value: Any) -> float | None:
    return None if value is None else jsonsafe.to_float(value)


@dataclass
class Batch:
    """Rows keyed by their unique key. The first event for a key wins here too; a
    later one with another value is kept in ``conflicts`` as (type, step, key, stored,
    sent) for :func:`write` to report."""

    metrics: dict[tuple[int, str], float] = field(default_factory=dict)
    trajectories: dict[tuple, Trajectory] = field(default_factory=dict)
    segment_parts: dict[tuple, list[prompts.Part]] = field(default_factory=dict)
    judgements: dict[tuple, Judgement] = field(default_factory=dict)
    critical_paths: dict[tuple, CriticalPath] = field(default_factory=dict)
    alerts: dict[tuple, Alert] = field(default_factory=dict)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    conflicts: list[tuple] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(
            len(d)
            for d in (
                self.metrics,
                self.trajectories,
                self.judgements,
                self.critical_paths,
                self.alerts,
                self.checkpoints,
            )
        )

    def add(self, run_id: Any, event: dict[str, Any], attempt: int = 0) -> None:
        kind, step = event.get("type"), as_int(event.get("step"))
        if kind == "step":
            metrics = event.get("metrics")
            for key, value in metrics.items() if isinstance(metrics, dict) else ():
                self._metric(step, jsonsafe.text(key, _KEY_LIMIT), value)
        elif kind == "trajectory":
            row = trajectory_row(run_id, step, event)
            key = (step, row.group, row.index)
            if self._put(self.trajectories, key, row):
                self.segment_parts[key] = row.segment_parts
        elif kind == "judgement":
            row = judgement_row(run_id, step, event)
            self._put(self.judgements, (step, row.group, row.index, row.judge), row)
        elif kind == "critical_path":
            row = CriticalPath(
                run_id=run_id,
                step=step,
                group=as_int(event.get("group")),
                index=as_int(event.get("index")),
                stages=jsonsafe.clean(event.get("stages") or []),
                critical_steps=as_int(event.get("critical_steps")),
                total_steps=as_int(event.get("total_steps")),
                path=jsonsafe.clean(event.get("path") or []),
            )
            self._put(self.critical_paths, (step, row.group, row.index), row)
        elif kind == "alert":
            row = Alert(
                run_id=run_id,
                step=step,
                detector=jsonsafe.text(event.get("detector"), 64),
                severity=jsonsafe.text(event.get("severity") or "warning", 16),
                message=jsonsafe.text(event.get("message"), 10000),
                evidence=jsonsafe.clean(event.get("evidence") or {}),
                trajectories=fields.alert_trajectories(event.get("trajectories")),
            )
            self._put(self.alerts, (step, row.detector), row)
        elif kind == "checkpoint":
            row = Checkpoint(
                run_id=run_id,
                step=step,
                path=jsonsafe.text(event.get("path"), 1024),
                attempt=as_int(event.get("attempt"), attempt)
                if event.get("attempt") is not None
                else attempt,
            )
            self._put(self.checkpoints, step, row)

    def _metric(self, step: int, key: str, value: Any) -> None:
        value, old = jsonsafe.to_float(value), self.metrics.get((step, key))
        if (step, key) not in self.metrics:
            self.metrics[(step, key)] = value
        elif not conflicts.same(old, value):
            self.conflicts.append(
                ("step", step, {"key": key}, jsonsafe.num(old), jsonsafe.num(value))
            )

    def _put(self, rows: dict, key: Any, row: Any) -> bool:
        """Keep ``row`` unless its key came earlier in the batch (True if kept)."""
        first = rows.setdefault(key, row)
        if first is row:
            return True
        kind, key_fields, compared = conflicts.KEYED[type(row)]
        differs = [
            f
            for f in compared
            if not conflicts.same(getattr(first, f), getattr(row, f))
        ]
        if differs:
            self.conflicts.append(
                (
                    kind,
                    row.step,
                    {f: getattr(row, f) for f in key_fields},
                    jsonsafe.clean({f: getattr(first, f) for f in differs}),
                    jsonsafe.clean({f: getattr(row, f) for f in differs}),
                )
            )
        return False


def trajectory_row(run_id: Any, step: int, event: dict[str, Any]) -> Trajectory:
    parts = arrays.pack_segment_list(event.get("segments") or [])
    row = Trajectory(
        run_id=run_id,
        step=step,
        group=as_int(event.get("group")),
        index=as_int(event.get("index")),
        task_id=jsonsafe.text(event.get("task_id"), 200),
        dropped=bool(event.get("dropped")),
        reward=_float_or_none(event.get("reward")),
        advantage=_float_or_none(event.get("advantage")),
        num_turns=as_int(event.get("num_turns")),
        length=as_int(event.get("length")),
        truncated=bool(event.get("truncated")),
        rewards=jsonsafe.clean(event.get("rewards") or {}),
        facts=jsonsafe.clean(event.get("facts") or {}),
        agent_steps=jsonsafe.clean(event.get("steps") or []),
        segments=[m for m, _ in parts],
        arrays=b"".join(b for _, b in parts),
        clipped=event.get(bounds.CLIPPED) or [],
    )
    row.segment_parts = parts  # for prompts.share
    return row


def judgement_row(run_id: Any, step: int, event: dict[str, Any]) -> Judgement:
    target = event.get("target_step")
    return Judgement(
        run_id=run_id,
        step=step,
        group=as_int(event.get("group")),
        index=as_int(event.get("index")),
        judge=jsonsafe.text(event.get("judge"), 64),
        backend=jsonsafe.text(event.get("backend"), 32),
        ok=bool(event.get("ok", True)),
        score=_float_or_none(event.get("score")),
        scores=jsonsafe.clean(event.get("scores") or {}),
        rationale=jsonsafe.text(event.get("rationale")),
        raw=jsonsafe.opt_text(event.get("raw")),
        error=jsonsafe.opt_text(event.get("error")),
        target_step=None if target is None else as_int(target),
    )
