"""First write wins: what a re-sent key that differs from the stored row is.

Every stored row is keyed (run, step, then key, group/index, judge or detector). A
key written again keeps its first row (:mod:`dashboard.ingest.writer` inserts only
fresh keys); when the re-sent row differs on a compared field it is a conflict,
reported to whoever sent it (the events API answers ``conflicts``) and never applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dashboard import jsonsafe
from dashboard.models import Alert, Checkpoint, CriticalPath, Judgement, Trajectory

CONFLICTS_SHOWN = 20


@dataclass
class Outcome:
    """What a write found besides the fresh rows: ``stale_steps``, the steps whose
    every metric point was already stored (a re-sent step), and the conflicts: keys
    re-sent with another value, the stored one kept. ``conflicting`` names the events
    (``("step", step)`` or ``(type, step, *key)``); ``shown`` describes the first
    :data:`CONFLICTS_SHOWN` (JSON-safe)."""

    stale_steps: set[int] = field(default_factory=set)
    conflicting: set[tuple] = field(default_factory=set)
    count: int = 0
    shown: list[dict[str, Any]] = field(default_factory=list)

    def conflict(
        self, kind: str, step: int, key: dict[str, Any], stored: Any, sent: Any
    ) -> None:
        self.count += 1
        self.conflicting.add(
            ("step", step) if kind == "step" else (kind, step, *key.values())
        )
        if len(self.shown) < CONFLICTS_SHOWN:
            self.shown.append(
                {"type": kind, "step": step, **key, "stored": stored, "sent": sent}
            )


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (and to NULL: how SQLite may hold it)."""
    return a == b or (_missing(a) and _missing(b))


# Per model: the event type, the fields of its key beside (run, step), and the fields
# a re-sent row is compared on (a differing one is a conflict).
KEYED = {
    Trajectory: (
        "trajectory",
        ("group", "index"),
        (
            "reward",
            "advantage",
            "length",
            "num_turns",
            "dropped",
            "truncated",
            "task_id",
            "rewards",
        ),
    ),
    Judgement: (
        "judgement",
        ("group", "index", "judge"),
        ("ok", "score", "scores", "backend", "error"),
    ),
    CriticalPath: (
        "critical_path",
        ("group", "index"),
        ("critical_steps", "total_steps"),
    ),
    Alert: ("alert", ("detector",), ("severity", "message")),
    Checkpoint: ("checkpoint", (), ("path",)),
}


def fresh(run_id: Any, model: type, rows: dict, outcome: Outcome) -> dict:
    """The rows (keyed ``(step, *key)``, or ``step`` for checkpoints) whose keys are
    not stored; a stored one that differs on a compared field is a conflict."""
    if not rows:
        return rows
    kind, key_fields, compared = KEYED[model]
    keyed = {(k if isinstance(k, tuple) else (k,)): row for k, row in rows.items()}
    stored = model.objects.filter(
        run_id=run_id, step__in={k[0] for k in keyed}
    ).values_list("step", *key_fields, *compared)
    width = 1 + len(key_fields)
    fresh = dict(keyed)
    for values in stored:
        row = fresh.pop(tuple(values[:width]), None)
        if row is None:
            continue
        old = dict(zip(compared, values[width:], strict=True))
        new = {f: getattr(row, f) for f in compared}
        differs = [f for f in compared if not same(old[f], new[f])]
        if differs:
            outcome.conflict(
                kind,
                row.step,
                {f: getattr(row, f) for f in key_fields},
                jsonsafe.clean({f: old[f] for f in differs}),
                jsonsafe.clean({f: new[f] for f in differs}),
            )
    if model is Checkpoint:
        return {k[0]: row for k, row in fresh.items()}
    return fresh
