"""A run's events read back: the backfill a client that missed frames asks for, and the
export of the whole run as JSON lines in the trainer's event shapes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from dashboard import jsonsafe
from dashboard.models import (
    Alert,
    Checkpoint,
    CriticalPath,
    Judgement,
    MetricPoint,
    Run,
    Trajectory,
)
from dashboard.reads.metrics import metric_value
from dashboard.reads.runs import alert_dict
from dashboard.reads.trajectories import (
    critical_path_dict,
    judgement_dict,
    judgement_summary,
    trajectory_detail,
    trajectory_summary,
)

EXPORT_STEPS = 1000


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
        steps.setdefault(step, {})[key] = metric_value(value)
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


def export_lines(run: Run) -> Iterator[str]:
    """The run as JSON lines in the trainer's event shapes (``trainer.events``): a
    ``run`` header, then step, trajectory, judgement, critical_path, alert and
    checkpoint events, each group ordered by step."""

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
            "config": run.config,
            "parent": str(run.parent_id) if run.parent_id else None,
            "created_at": run.created_at.isoformat(),
        }
    )
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
        metrics[key] = metric_value(value)
    if current is not None:
        yield line({"type": "step", "step": current, "metrics": metrics})
    for t in (
        Trajectory.objects.filter(run=run)
        .order_by("step", "group", "index")
        .iterator(chunk_size=200)
    ):
        yield line({"type": "trajectory", **trajectory_detail(t)})
    for j in (
        Judgement.objects.filter(run=run)
        .order_by("step", "group", "index", "judge")
        .iterator(chunk_size=1000)
    ):
        yield line({"type": "judgement", **judgement_dict(j)})
    for c in (
        CriticalPath.objects.filter(run=run)
        .order_by("step", "group", "index")
        .iterator(chunk_size=1000)
    ):
        yield line({"type": "critical_path", **critical_path_dict(c)})
    for a in (
        Alert.objects.filter(run=run)
        .order_by("step", "detector")
        .iterator(chunk_size=1000)
    ):
        yield line({"type": "alert", **alert_dict(a)})
    for c in Checkpoint.objects.filter(run=run).order_by("step"):
        yield line({"type": "checkpoint", "step": c.step, "attempt": c.attempt})
