"""Frames: the small JSON messages a run page receives over its websocket.

A frame says what was committed since the previous frame of the run::

    {"type": "frame", "run": "<uuid>", "seq": 17, "status": "running", "last_step": 42,
     "steps": [{"step": 41, "metrics": {"reward": 0.5, "kl": "NaN"}}, ...],
     "trajectories": [{"step", "group", "index", "task_id", "reward", "advantage",
                       "dropped", "num_turns", "length"}, ...],
     "judgements": [{"step", "group", "index", "judge", "ok", "score"}, ...],
     "alerts": [{"step", "detector", "severity", "message",
                 "trajectories": [{"group", "index", "task_id", "why"}],
                 "evidence": {"trajectories_matched"}}, ...],
     "checkpoints": [{"step"}], "warmup": {"done", "of", "loss"} | null,
     "truncated": false}

``warmup`` is the warm start's progress before step 1 (a ``warmstart`` event).

Frames go to the channel group ``run-<id>``, which each web process joins once per
run it has pages open on (``dashboard.consumers.RunHub``), then copies to its sockets.
``seq`` comes from ``Run.frame_seq`` (incremented in the database), so it increases
across attempts and processes; a client that sees a gap, ``truncated: true`` or a
reconnect fetches ``/api/runs/<id>/backfill?since_step=N``. Frames are only built from
committed rows and sent after the commit; non-finite numbers are strings and every
string is JSON-escaped (model text is never trusted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from dashboard.live import streaming
from dashboard.models import Run

MAX_STEPS = 200
MAX_ITEMS = 100


@dataclass
class FrameParts:
    """What a frame will report, accumulated over one or more commits."""

    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    judgements: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    status: str | None = None
    last_step: int | None = None
    warmup: dict[str, Any] | None = None
    truncated: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.steps
            or self.trajectories
            or self.judgements
            or self.alerts
            or self.checkpoints
            or self.status
            or self.warmup
            or self.truncated
        )

    def merge(self, other: FrameParts) -> None:
        for step, metrics in other.steps.items():
            self.steps.setdefault(step, {}).update(metrics)
        for name in ("trajectories", "judgements", "alerts", "checkpoints"):
            mine = getattr(self, name)
            mine.extend(getattr(other, name))
            if len(mine) > MAX_ITEMS:
                del mine[: len(mine) - MAX_ITEMS]
                self.truncated = True
        if len(self.steps) > MAX_STEPS:
            for step in sorted(self.steps)[: len(self.steps) - MAX_STEPS]:
                del self.steps[step]
            self.truncated = True
        self.status = other.status or self.status
        self.warmup = other.warmup or self.warmup
        if other.last_step is not None:
            self.last_step = other.last_step
        self.truncated = self.truncated or other.truncated


def reserve_seq(run_id: Any) -> tuple[int, str, int]:
    """Take the run's next frame number: (seq, status, last_step)."""
    table = Run._meta.db_table
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} SET frame_seq = frame_seq + 1 WHERE id = %s "
            "RETURNING frame_seq, status, last_step",
            [Run._meta.pk.get_db_prep_value(run_id, connection)],
        )
        row = cur.fetchone()
    if row is None:
        raise Run.DoesNotExist(run_id)
    return int(row[0]), str(row[1]), int(row[2])


def encode(
    run_id: Any, seq: int, status: str, last_step: int, parts: FrameParts
) -> str:
    return json.dumps(
        {
            "type": "frame",
            "run": str(run_id),
            "seq": seq,
            "status": parts.status or status,
            "last_step": parts.last_step if parts.last_step is not None else last_step,
            "steps": [
                {"step": s, "metrics": parts.steps[s]} for s in sorted(parts.steps)
            ],
            "trajectories": parts.trajectories,
            "judgements": parts.judgements,
            "alerts": parts.alerts,
            "checkpoints": parts.checkpoints,
            "warmup": parts.warmup,
            "truncated": parts.truncated,
        },
        allow_nan=False,
        separators=(",", ":"),
    )


def send(run_id: Any, parts: FrameParts | None = None) -> bool:
    """Number, encode and publish one frame now (call outside or after a commit)."""
    try:
        seq, status, last_step = reserve_seq(run_id)
    except Run.DoesNotExist:
        return False
    return streaming.publish(
        run_id, encode(run_id, seq, status, last_step, parts or FrameParts())
    )


def send_on_commit(run_id: Any, parts: FrameParts | None = None) -> None:
    """Publish a frame once the current transaction commits (a status change...)."""
    transaction.on_commit(lambda: send(run_id, parts))
