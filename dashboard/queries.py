"""Read side: downsampled metrics, backfill, trajectory detail, export.

Everything returned is JSON-ready: non-finite floats are the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` (``dashboard.jsonsafe.num``), per-token arrays are
decoded lists. Ownership is checked by the caller (``services.get_run_for_user``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction

from dashboard import arrays, jsonsafe
from dashboard.models import (
    ROLLUP_SHIFT,
    Alert,
    Checkpoint,
    CriticalPath,
    Judgement,
    MetricPoint,
    MetricRollup,
    Run,
    Trajectory,
)

MAX_POINTS = 2000
MAX_KEYS = 32
ROLLUP_STEPS = 1 << ROLLUP_SHIFT
# The planner cannot know a chart query yields only ~points groups; left alone it picks
# a parallel seq scan + sort (and JIT) on big tables, 5-10x slower than an index-only
# scan into a hash aggregate. Scoped to the query's own transaction.
_PLANNER_HINTS = (
    "SET LOCAL jit = off; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off"
)
EXPORT_STEPS = 1000
num = jsonsafe.num


def _value(v: float | None) -> float | str | None:
    """A stored metric value for JSON (NULL is SQLite's NaN)."""
    return jsonsafe.NAN if v is None else num(v)


def metric_keys(run: Run) -> list[str]:
    return list(
        MetricPoint.objects.filter(run=run)
        .values_list("key", flat=True)
        .distinct()
        .order_by("key")
    )


def _bounds(run: Run, keys: list[str], since_step: int) -> tuple[int, int] | None:
    if connection.vendor == "postgresql":
        # One index probe per key (min/max on the (run, key, step) index), not a scan.
        sql = (
            f"SELECT min(b.lo), max(b.hi) FROM unnest(%s::varchar[]) AS k(key), LATERAL "
            f"(SELECT min(step) AS lo, max(step) AS hi FROM {MetricPoint._meta.db_table} m "
            "WHERE m.run_id = %s AND m.key = k.key AND m.step > %s) AS b"
        )
        with connection.cursor() as cur:
            cur.execute(sql, [keys, run.pk, since_step])
            lo, hi = cur.fetchone()
    else:
        qs = MetricPoint.objects.filter(run=run, key__in=keys, step__gt=since_step)
        lo = qs.order_by("step").values_list("step", flat=True).first()
        hi = qs.order_by("-step").values_list("step", flat=True).first()
    return None if lo is None else (int(lo), int(hi))


def downsample_metrics(
    run: Run, keys: list[str], *, since_step: int = -1, points: int = 1000
) -> dict[str, Any]:
    """Per key, bucketed by step range: each bucket's min, max and last value with the
    step of each (``points`` buckets at most, capped at :data:`MAX_POINTS`). Buckets
    are equal step ranges from the first step after ``since_step``; on PostgreSQL,
    when a bucket spans at least 16 steps, they are read from ``MetricRollup`` and
    their width is a multiple of 16 (plus one leading partial bucket when
    ``since_step`` falls inside a rollup bucket)."""
    points = max(1, min(int(points), MAX_POINTS))
    keys = list(dict.fromkeys(keys))[:MAX_KEYS]
    out: dict[str, Any] = {
        "run": str(run.pk),
        "since_step": since_step,
        "points": points,
        "bucket_width": 1,
        "last_step": run.last_step,
        "series": {},
    }
    bounds = _bounds(run, keys, since_step) if keys else None
    if bounds is None:
        return out
    lo, hi = bounds
    width = max(1, math.ceil((hi - lo + 1) / points))
    if connection.vendor != "postgresql":
        rows = _bucket_rows_py(run, keys, lo, hi, width)
    elif width >= ROLLUP_STEPS:
        rows, width = _bucket_rows_rollup(run, keys, lo, hi, points)
    else:
        rows = _bucket_rows_sql(run, keys, lo, hi, width)
    out["bucket_width"] = width
    series: dict[str, dict[str, list]] = {}
    for key, mn, mn_step, mx, mx_step, last, last_step in rows:
        s = series.setdefault(
            key,
            {
                "step": [],
                "last": [],
                "min": [],
                "min_step": [],
                "max": [],
                "max_step": [],
            },
        )
        s["step"].append(last_step)
        s["last"].append(_value(last))
        s["min"].append(_value(mn))
        s["min_step"].append(mn_step)
        s["max"].append(_value(mx))
        s["max_step"].append(mx_step)
    out["series"] = series
    return out


def _bucket_rows_sql(
    run: Run, keys: list[str], lo: int, hi: int, width: int
) -> list[tuple]:
    # One pass over the covering (run, key, step) INCLUDE (value) index, hashed by
    # bucket. min/max of ARRAY[value, step] is an argmin/argmax without a sort (arrays
    # compare element by element); max of ARRAY[step, value] is the last point. NaN
    # sorts above every number in PostgreSQL, so a bucket holding NaN reports it as
    # its max: a diverged bucket stays visible.
    sql = (
        "SELECT key, min(ARRAY[value, step]), max(ARRAY[value, step]), max(ARRAY[step, value]) "
        f"FROM {MetricPoint._meta.db_table} "
        "WHERE run_id = %s AND key = ANY(%s::varchar[]) AND step BETWEEN %s AND %s "
        "GROUP BY key, (step - %s) / %s"
    )
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_PLANNER_HINTS)
        cur.execute(sql, [run.pk, keys, lo, hi, lo, width])
        rows = cur.fetchall()
    out = [
        (key, mn[0], int(mn[1]), mx[0], int(mx[1]), last[1], int(last[0]))
        for key, mn, mx, last in rows
    ]
    out.sort(key=lambda r: (r[0], r[6]))
    return out


def _bucket_rows_rollup(
    run: Run, keys: list[str], lo: int, hi: int, points: int
) -> tuple[list[tuple], int]:
    """Buckets built from 16-step rollup rows: ~16x fewer rows than the points."""
    head: list[tuple] = []
    if (
        lo % ROLLUP_STEPS
    ):  # since_step cut a rollup bucket: read its rest from the points
        head_hi = min(hi, ((lo >> ROLLUP_SHIFT) + 1) * ROLLUP_STEPS - 1)
        head = _bucket_rows_sql(run, keys, lo, head_hi, head_hi - lo + 1)
        lo, points = head_hi + 1, max(1, points - 1)
    if lo > hi:
        return sorted(head, key=lambda r: (r[0], r[6])), ROLLUP_STEPS
    per = max(
        1, math.ceil((hi - lo + 1) / points / ROLLUP_STEPS)
    )  # rollup rows per bucket
    b0, b1 = lo >> ROLLUP_SHIFT, hi >> ROLLUP_SHIFT
    sql = (
        "SELECT key, min(ARRAY[vmin, smin]), max(ARRAY[vmax, smax]), max(ARRAY[slast, vlast]) "
        f"FROM {MetricRollup._meta.db_table} "
        "WHERE run_id = %s AND key = ANY(%s::varchar[]) AND bucket BETWEEN %s AND %s "
        "GROUP BY key, (bucket - %s) / %s"
    )
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_PLANNER_HINTS)
        cur.execute(sql, [run.pk, keys, b0, b1, b0, per])
        rows = cur.fetchall()
    body = [
        (key, mn[0], int(mn[1]), mx[0], int(mx[1]), last[1], int(last[0]))
        for key, mn, mx, last in rows
    ]
    return sorted(head + body, key=lambda r: (r[0], r[6])), per * ROLLUP_STEPS


def _bucket_rows_py(
    run: Run, keys: list[str], lo: int, hi: int, width: int
) -> list[tuple]:
    rows = (
        MetricPoint.objects.filter(run=run, key__in=keys, step__gte=lo, step__lte=hi)
        .order_by("key", "step")
        .values_list("key", "step", "value")
    )
    out: list[tuple] = []
    cur: list | None = None
    for key, step, value in rows.iterator(chunk_size=5000):
        v = math.nan if value is None else value
        bucket = (key, (step - lo) // width)
        if cur is None or cur[0] != bucket:
            if cur is not None:
                out.append(tuple(cur[1]))
            cur = [bucket, [key, v, step, v, step, v, step]]
        else:  # same order as PostgreSQL: NaN above numbers, ties to the later step for max
            r = cur[1]
            if not math.isnan(v) and (math.isnan(r[1]) or v < r[1]):
                r[1], r[2] = v, step
            if math.isnan(v) or (not math.isnan(r[3]) and v >= r[3]):
                r[3], r[4] = v, step
            r[5], r[6] = v, step
    if cur is not None:
        out.append(tuple(cur[1]))
    return out


# --- rows as JSON ----------------------------------------------------------------------
def trajectory_summary(t: Trajectory) -> dict[str, Any]:
    return {
        "step": t.step,
        "group": t.group,
        "index": t.index,
        "task_id": t.task_id,
        "dropped": t.dropped,
        "reward": _value(t.reward),
        "advantage": _value(t.advantage),
        "num_turns": t.num_turns,
        "length": t.length,
        "truncated": t.truncated,
        "rewards": t.rewards,
    }


def trajectory_detail(t: Trajectory) -> dict[str, Any]:
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["segments"] = arrays.unpack_segments(t.segments, t.arrays)
    return out


def judgement_dict(j: Judgement) -> dict[str, Any]:
    return {
        "step": j.step,
        "group": j.group,
        "index": j.index,
        "judge": j.judge,
        "backend": j.backend,
        "ok": j.ok,
        "score": None if j.score is None else num(j.score),
        "scores": j.scores,
        "rationale": j.rationale,
        "raw": j.raw,
        "error": j.error,
        "target_step": j.target_step,
    }


def critical_path_dict(c: CriticalPath) -> dict[str, Any]:
    return {
        "step": c.step,
        "group": c.group,
        "index": c.index,
        "stages": c.stages,
        "critical_steps": c.critical_steps,
        "total_steps": c.total_steps,
        "path": c.path,
    }


def alert_dict(a: Alert) -> dict[str, Any]:
    return {
        "step": a.step,
        "detector": a.detector,
        "severity": a.severity,
        "message": a.message,
        "evidence": a.evidence,
    }


def checkpoint_dict(c: Checkpoint) -> dict[str, Any]:
    return {
        "step": c.step,
        "attempt": c.attempt,
        "created_at": c.created_at.isoformat(),
    }


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
        steps.setdefault(step, {})[key] = _value(value)
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
        "judgements": [
            {
                "step": j.step,
                "group": j.group,
                "index": j.index,
                "judge": j.judge,
                "ok": j.ok,
                "score": None if j.score is None else num(j.score),
            }
            for j in judgements[:2000]
        ],
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
        metrics[key] = _value(value)
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
