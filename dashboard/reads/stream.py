"""A run's events read back: where its stream stands (the websocket's hello), the
backfill a client that missed frames asks for, and the export of the whole run as JSON
lines in the trainer's event shapes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from dashboard import jsonsafe
from dashboard.library import roots
from dashboard.models import (
    Alert,
    Checkpoint,
    CriticalPath,
    Judgement,
    MetricPoint,
    Run,
    Trajectory,
)
from dashboard.reads.runs import alert_dict
from dashboard.reads.trajectories import (
    critical_path_dict,
    judgement_dict,
    judgement_summary,
    trajectory_detail,
    trajectory_summary,
    trajectory_text,
)


def position(run_id: Any) -> dict[str, Any] | None:
    """Where the run's stream stands, as committed: ``status``, ``last_step`` and
    ``frame_seq`` (what a page compares with what it has, to know what to backfill);
    None when the run is gone."""
    return (
        Run.objects.filter(pk=run_id).values("status", "last_step", "frame_seq").first()
    )


def backfill(run: Run, since_step: int = -1, max_steps: int = 500) -> dict[str, Any]:
    """Everything committed at steps in (since_step, since_step + max_steps]: what the
    frames said, for a client that missed some. ``more``: call again from ``until_step``."""
    run.refresh_from_db(fields=["status", "last_step", "frame_seq"])
    until = since_step + max_steps
    steps: dict[int, dict[str, Any]] = {}
    metrics = MetricPoint.objects.filter(
        run=run, step__gt=since_step, step__lte=until
    ).order_by("step", "key")
    for step, key, value in metrics.values_list("step", "key", "value"):
        steps.setdefault(step, {})[key] = jsonsafe.num(value)
    in_range = {"run": run, "step__gt": since_step, "step__lte": until}
    trajectories = (
        Trajectory.objects.filter(**in_range)
        .defer("arrays", "segments", "facts", "agent_steps")
        .order_by("step", "group", "index")
    )
    judgements = Judgement.objects.filter(**in_range).order_by(
        "step", "group", "index", "judge"
    )
    return {
        "run": str(run.pk),
        "status": run.status,
        "last_step": run.last_step,
        "frame_seq": run.frame_seq,
        "since_step": since_step,
        "until_step": until,
        "more": until < run.last_step,
        "steps": [{"step": s, "metrics": steps[s]} for s in sorted(steps)],
        "trajectories": [trajectory_summary(t) for t in trajectories[:2000]],
        "judgements": [judgement_summary(j) for j in judgements[:2000]],
        "alerts": [
            alert_dict(a)
            for a in Alert.objects.filter(**in_range).order_by("step", "detector")[
                :1000
            ]
        ],
        "checkpoints": [
            {"step": c.step}
            for c in Checkpoint.objects.filter(**in_range).order_by("step")
        ],
    }


EXPORT_PARTS = (
    "metrics",
    "trajectories",
    "token_arrays",
    "judgements",
    "critical_paths",
    "alerts",
    "checkpoints",
)


def export_lines(run: Run, parts: Iterable[str] = EXPORT_PARTS) -> Iterator[str]:
    """The run as JSON lines in the trainer's event shapes (``trainer.events``): a
    ``run`` header, then step, trajectory, judgement, critical_path, alert and
    checkpoint events, each kind ordered by step. ``parts`` chooses what goes in
    (:data:`EXPORT_PARTS`; without ``token_arrays`` a trajectory keeps its text and
    tokens but not the per-token ids and floats, most of a run's bytes)."""
    parts = set(parts)

    def line(obj: dict[str, Any]) -> str:
        return json.dumps(jsonsafe.clean(obj), allow_nan=False) + "\n"

    yield line(
        {
            "type": "run",
            "id": str(run.pk),
            "name": run.name,
            "status": run.status,
            "attempt": run.attempt,
            "last_step": run.last_step,
            "external": run.external,
            "framework": run.framework,
            "config": roots.shown_config(run),  # paths relative to their root
            "parent": str(run.parent_id) if run.parent_id else None,
            "created_at": run.created_at.isoformat(),
            "parts": [p for p in EXPORT_PARTS if p in parts],
        }
    )
    if "metrics" in parts:
        yield from _metric_lines(run, line)
    if "trajectories" in parts:
        arrays_too = "token_arrays" in parts
        rows = Trajectory.objects.filter(run=run).order_by("step", "group", "index")
        if not arrays_too:
            rows = rows.defer("arrays")
        cache: dict = {}  # one group's shared prompt read once
        for t in rows.iterator(chunk_size=200):
            out = (
                trajectory_detail(t, cache) if arrays_too else trajectory_text(t, cache)
            )
            yield line({"type": "trajectory", **out})
    if "judgements" in parts:
        for j in (
            Judgement.objects.filter(run=run)
            .order_by("step", "group", "index", "judge")
            .iterator(chunk_size=1000)
        ):
            yield line({"type": "judgement", **judgement_dict(j)})
    if "critical_paths" in parts:
        for c in (
            CriticalPath.objects.filter(run=run)
            .order_by("step", "group", "index")
            .iterator(chunk_size=1000)
        ):
            yield line({"type": "critical_path", **critical_path_dict(c)})
    if "alerts" in parts:
        for a in (
            Alert.objects.filter(run=run)
            .order_by("step", "detector")
            .iterator(chunk_size=1000)
        ):
            yield line({"type": "alert", **alert_dict(a)})
    if "checkpoints" in parts:
        for c in Checkpoint.objects.filter(run=run).order_by("step"):
            yield line({"type": "checkpoint", "step": c.step, "attempt": c.attempt})


def _metric_lines(run: Run, line: Any) -> Iterator[str]:
    current: int | None = None
    metrics: dict[str, Any] = {}
    rows = (
        MetricPoint.objects.filter(run=run)
        .order_by("step", "key")
        .values_list("step", "key", "value")
    )
    for step, key, value in rows.iterator(chunk_size=5000):
        if step != current and current is not None:
            yield line({"type": "step", "step": current, "metrics": metrics})
            metrics = {}
        current = step
        metrics[key] = jsonsafe.num(value)
    if current is not None:
        yield line({"type": "step", "step": current, "metrics": metrics})


def gzip_chunks(lines: Iterator[str], chunk_bytes: int = 1 << 16) -> Iterator[bytes]:
    """``lines`` as one gzip stream, in chunks of about ``chunk_bytes`` compressed."""
    import zlib

    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer
    pending: list[bytes] = []
    size = 0
    for text in lines:
        out = z.compress(text.encode("utf-8"))
        if out:
            pending.append(out)
            size += len(out)
        if size >= chunk_bytes:
            yield b"".join(pending)
            pending, size = [], 0
    pending.append(z.flush())
    yield b"".join(pending)
