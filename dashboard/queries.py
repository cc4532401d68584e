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

from dashboard import jsonsafe, prompts
from dashboard.ingest import BUCKET_AGGREGATES, POINTS, ROLLUPS
from dashboard.models import (
    ROLLUP_SHIFTS,
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
# The planner cannot know a chart query yields only ~points groups; left alone it picks
# a parallel seq scan + sort (and JIT) on big tables, 5-10x slower than an index-only
# scan into a hash aggregate. Scoped to the query's own transaction.
_PLANNER_HINTS = (
    "SET LOCAL jit = off; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; "
    "SET LOCAL extra_float_digits = 1"  # floats as text: shortest exact form
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
    """Per key, the steps after ``since_step`` cut into ``points`` buckets (fewer when
    there are fewer steps), each with its min, max and last value and the step of
    each (``points`` capped at :data:`MAX_POINTS`).

    Buckets are consecutive step ranges of near-equal width: bucket ``j`` of ``n``
    units holds the units ``u`` with ``u * points // n == j``. A unit is a step, or on
    PostgreSQL a ``MetricRollup`` row of the coarsest level that still has at least
    ``points`` rows in the range (one bucket then holds 1 to 4 rollup rows; when
    ``since_step`` cuts a rollup row, the rest of that row is read from the points
    and joins the first bucket). ``bucket_width`` is the widest bucket in steps (on
    the rollup path, an upper bound).
    """
    out, series = _downsample(run, keys, since_step, points)
    out["series"] = {key: json.loads(text) for key, text in series.items()}
    return out


def downsample_metrics_json(
    run: Run, keys: list[str], *, since_step: int = -1, points: int = 1000
) -> str:
    """:func:`downsample_metrics` as JSON text. On PostgreSQL the database writes each
    series' JSON itself (non-finite values as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``, as :mod:`dashboard.jsonsafe` spells them): no Python object per
    value."""
    out, series = _downsample(run, keys, since_step, points)
    body = ",".join(f"{json.dumps(key)}:{text}" for key, text in series.items())
    return json.dumps(out, separators=(",", ":"))[:-1] + f',"series":{{{body}}}}}'


def _downsample(
    run: Run, keys: list[str], since_step: int, points: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """The response without its series, and each key's series as JSON text."""
    points = max(1, min(int(points), MAX_POINTS))
    keys = list(dict.fromkeys(keys))[:MAX_KEYS]
    out: dict[str, Any] = {
        "run": str(run.pk),
        "since_step": since_step,
        "points": points,
        "bucket_width": 1,
        "last_step": run.last_step,
    }
    bounds = _bounds(run, keys, since_step) if keys else None
    if bounds is None:
        return out, {}
    lo, hi = bounds
    out["bucket_width"] = math.ceil((hi - lo + 1) / points)
    if connection.vendor != "postgresql":
        return out, _series_py(_bucket_rows_py(run, keys, lo, hi, points))
    shift = _rollup_level(lo, hi, points, since_step)
    if shift is None:
        part = _points_sql(run, keys, lo, hi, points)
    else:
        part, out["bucket_width"] = _rollup_sql(
            run, keys, lo, hi, points, shift, since_step
        )
    return out, _series_pg(part)


def _rollup_level(lo: int, hi: int, points: int, since_step: int) -> int | None:
    """The coarsest rollup level with at least ``points`` rows wholly inside
    (since_step, hi]; None when even the finest has fewer (the points themselves are
    few enough)."""
    for shift in sorted(ROLLUP_SHIFTS, reverse=True):
        if (hi >> shift) - _first_whole_row(lo, shift, since_step) + 1 >= points:
            return shift
    return None


def _first_whole_row(lo: int, shift: int, since_step: int) -> int:
    """The first rollup row of this level holding no step <= ``since_step``: the row
    of ``lo``, or the next one when since_step cuts it."""
    row = lo >> shift
    return row + 1 if row << shift <= since_step else row


Part = tuple[str, list]  # one query's SQL and parameters


def _points_sql(run: Run, keys: list[str], lo: int, hi: int, points: int) -> Part:
    """Buckets of raw points: one pass over the covering (run, key, step) INCLUDE
    (value) index, hashed by bucket."""
    sql = (
        f"SELECT key, {BUCKET_AGGREGATES.format(**POINTS)} "
        f"FROM {MetricPoint._meta.db_table} "
        "WHERE run_id = %s AND key = ANY(%s::varchar[]) AND step BETWEEN %s AND %s "
        "GROUP BY key, ((step - %s)::bigint * %s) / %s"
    )
    return sql, [run.pk, keys, lo, hi, lo, points, hi - lo + 1]


def _rollup_sql(
    run: Run,
    keys: list[str],
    lo: int,
    hi: int,
    points: int,
    shift: int,
    since_step: int,
) -> tuple[Part, int]:
    """Buckets built from the rollup rows of one level; where ``since_step`` cuts a
    rollup row, the rest of that row is read from the points and joins the first
    bucket. Returns the query and the widest bucket's width in steps."""
    size = 1 << shift
    first = _first_whole_row(lo, shift, since_step)
    head, params, head_width = "", [], 0
    if first > lo >> shift:  # the cut row's rest, from the points
        head_hi = first * size - 1
        head = (
            "SELECT key, 0::bigint, value, step, value, step, value, step "
            f"FROM {MetricPoint._meta.db_table} WHERE run_id = %s "
            "AND key = ANY(%s::varchar[]) AND step BETWEEN %s AND %s UNION ALL "
        )
        params = [run.pk, keys, lo, head_hi]
        head_width = head_hi - lo + 1
    n = (hi >> shift) - first + 1
    sql = (
        f"SELECT key, {BUCKET_AGGREGATES.format(**ROLLUPS)} FROM ({head}"
        "SELECT key, ((bucket - %s)::bigint * %s) / %s, "
        "vmin, smin, vmax, smax, vlast, slast "
        f"FROM {MetricRollup._meta.db_table} "
        "WHERE run_id = %s AND key = ANY(%s::varchar[]) AND shift = %s "
        "AND bucket BETWEEN %s AND %s) "
        "AS u(key, g, vmin, smin, vmax, smax, vlast, slast) GROUP BY key, g"
    )
    params += [first, points, n, run.pk, keys, shift, first, hi >> shift]
    return (sql, params), head_width + math.ceil(n / points) * size


def _series_pg(part: Part) -> dict[str, str]:
    """Each key's series as JSON text, written by PostgreSQL from bucket rows."""
    bucket_sql, params = part

    def values(col: str) -> str:  # NULL never reaches PostgreSQL's points; if it did
        return f"json_agg(COALESCE({col}, 'NaN'::float8) ORDER BY sl)"

    sql = (
        # The buckets are a CTE of their own, planned as before (index scan into a
        # hash aggregate); the outer grouping per key then sorts ~points rows a key.
        # Names and numbers hold no spaces: dropping them all makes the JSON compact.
        f"WITH b (key, mn, smn, mx, smx, vl, sl) AS MATERIALIZED ({bucket_sql}) "
        "SELECT key, replace(json_build_object('step', json_agg(sl ORDER BY sl), "
        f"'last', {values('vl')}, 'min', {values('mn')}, "
        "'min_step', json_agg(smn ORDER BY sl), "
        f"'max', {values('mx')}, 'max_step', json_agg(smx ORDER BY sl))::text, "
        "' ', '') FROM b GROUP BY key"
    )
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_PLANNER_HINTS)
        cur.execute(sql, params)
        return dict(sorted(cur.fetchall()))


def _series_py(rows: list[tuple]) -> dict[str, str]:
    """Each key's series as JSON text, from (key, min, min step, max, max step, last,
    last step) rows in key and step order."""
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
    return {
        key: json.dumps(s, allow_nan=False, separators=(",", ":"))
        for key, s in series.items()
    }


def _bucket_rows_py(
    run: Run, keys: list[str], lo: int, hi: int, points: int
) -> list[tuple]:
    """The same buckets as :func:`_points_sql`, for SQLite (NULL is NaN), in key and
    step order."""
    span = hi - lo + 1
    rows = (
        MetricPoint.objects.filter(run=run, key__in=keys, step__gte=lo, step__lte=hi)
        .order_by("key", "step")
        .values_list("key", "step", "value")
    )
    out: list[tuple] = []
    cur: list | None = None
    for key, step, value in rows.iterator(chunk_size=5000):
        v = math.nan if value is None else value
        bucket = (key, (step - lo) * points // span)
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


def trajectory_detail(
    t: Trajectory, prompt_cache: dict | None = None
) -> dict[str, Any]:
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["segments"] = prompts.segments_of(t, prompt_cache)  # the shared prompt first
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
    cache: dict = {}  # one group's shared prompt read once
    for t in (
        Trajectory.objects.filter(run=run)
        .order_by("step", "group", "index")
        .iterator(chunk_size=200)
    ):
        yield line({"type": "trajectory", **trajectory_detail(t, cache)})
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
