"""Metrics: the run's metric keys, downsampled series for charts (rollup levels on
PostgreSQL), sampled sparklines and best values."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    Max,
    Q,
    Subquery,
)

from dashboard import jsonsafe
from dashboard.ingest import rollups
from dashboard.ingest.rollups import BUCKET_AGGREGATES, POINTS, ROLLUPS
from dashboard.models import (
    ROLLUP_SHIFTS,
    MetricPoint,
    MetricRollup,
    Run,
    metric_keys,  # noqa: F401  (read here by the API and pages)
)
from dashboard.reads.reward_names import REWARD, reward_key

MAX_POINTS = 2000


MAX_KEYS = 32


# The planner cannot know a chart query yields only ~points groups; left alone it picks
# a parallel seq scan + sort (and JIT) on big tables, 5-10x slower than an index-only
# scan into a hash aggregate. Scoped to the query's own transaction.
_PLANNER_HINTS = (
    "SET LOCAL jit = off; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; "
    "SET LOCAL extra_float_digits = 1"  # floats as text: shortest exact form
)


num = jsonsafe.num


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# Stored values that are numbers (not NaN, not infinite): what a "best" may be.
# ``ExactFloatField`` finds NaN with ``=`` on both backends.
NOT_FINITE = [math.nan, math.inf, -math.inf]
FINITE = ~Q(value__in=NOT_FINITE)


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
    stored = _stored_keys(run, keys)
    out, series = _downsample_stored(
        run, list(dict.fromkeys(stored.values())), since_step, points
    )
    return out, {k: series[stored[k]] for k in sorted(keys) if stored[k] in series}


def _stored_keys(run: Run, keys: list[str]) -> dict[str, str]:
    """Each asked key and the stored one it is read from: itself, except ``reward``
    of an external run that logged its reward under its trainer's name
    (:mod:`dashboard.reads.reward_names`): the compare page overlays every run's
    ``reward``, whatever its trainer called it."""
    stored = {k: k for k in keys}
    if REWARD in stored and run.external:
        stored[REWARD] = reward_key(run)
    return stored


def _downsample_stored(
    run: Run, keys: list[str], since_step: int, points: int
) -> tuple[dict[str, Any], dict[str, str]]:
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
    shift = _rollup_level(lo, hi, points, since_step)
    if connection.vendor != "postgresql":
        if shift is None:
            return out, _series_py(_bucket_rows_py(run, keys, lo, hi, points))
        rows, out["bucket_width"] = _rollup_rows_py(
            run, keys, lo, hi, points, shift, since_step
        )
        return out, _series_py(rows)
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
        s["last"].append(num(last))
        s["min"].append(num(mn))
        s["min_step"].append(mn_step)
        s["max"].append(num(mx))
        s["max_step"].append(mx_step)
    return {
        key: json.dumps(s, allow_nan=False, separators=(",", ":"))
        for key, s in series.items()
    }


def _bucket_rows_py(
    run: Run, keys: list[str], lo: int, hi: int, points: int
) -> list[tuple]:
    """The same buckets as :func:`_points_sql`, for SQLite, in key and step order: each point folded into its bucket in PostgreSQL's order."""
    span = hi - lo + 1
    rows = MetricPoint.objects.filter(
        run=run, key__in=keys, step__gte=lo, step__lte=hi
    ).values_list("key", "step", "value")
    acc: dict[tuple[str, int], list] = {}
    for key, step, value in rows.iterator(chunk_size=5000):
        b = (key, (step - lo) * points // span)
        acc[b] = rollups.fold(acc.get(b), (value, step, value, step, value, step))
    return _bucket_tuples(acc)


def _bucket_tuples(acc: dict[tuple[str, int], list]) -> list[tuple]:
    """(key, min, min step, max, max step, last, last step) per bucket in key and
    bucket order."""
    return [(key, *row) for (key, _), row in sorted(acc.items())]


def _rollup_rows_py(
    run: Run,
    keys: list[str],
    lo: int,
    hi: int,
    points: int,
    shift: int,
    since_step: int,
) -> tuple[list[tuple], int]:
    """:func:`_rollup_sql` for SQLite: the same buckets from the same rollup rows (and
    the points of a row ``since_step`` cuts), folded in Python."""
    size = 1 << shift
    first = _first_whole_row(lo, shift, since_step)
    acc: dict[tuple[str, int], list] = {}
    head_width = 0
    if first > lo >> shift:  # the cut row's rest, from the points
        head_hi = first * size - 1
        head_width = head_hi - lo + 1
        for key, step, value in MetricPoint.objects.filter(
            run=run, key__in=keys, step__gte=lo, step__lte=head_hi
        ).values_list("key", "step", "value"):
            acc[(key, 0)] = rollups.fold(
                acc.get((key, 0)), (value, step, value, step, value, step)
            )
    n = (hi >> shift) - first + 1
    rows = MetricRollup.objects.filter(
        run=run, key__in=keys, shift=shift, bucket__gte=first, bucket__lte=hi >> shift
    ).values_list("key", "bucket", "vmin", "smin", "vmax", "smax", "vlast", "slast")
    for key, bucket, *row in rows.iterator(chunk_size=5000):
        g = ((bucket - first) * points) // n
        acc[(key, g)] = rollups.fold(acc.get((key, g)), row)
    return _bucket_tuples(acc), head_width + math.ceil(n / points) * size


def _latest(run_ref: Any, key: str) -> Subquery:
    return Subquery(
        MetricPoint.objects.filter(run_id=run_ref, key=key)
        .order_by("-step")
        .values("value")[:1]
    )


def best_rewards(
    run_ids: Iterable[Any], keys: dict[Any, str] | None = None
) -> dict[Any, float | None]:
    """Each run's best finite reward; ``keys``: a run's reward key where it is not
    ``reward`` (:func:`~dashboard.reads.reward_names.reward_keys`)."""
    keys = keys or {}
    cond = Q()
    for run_id in run_ids:
        cond |= Q(run_id=run_id, key=keys.get(run_id, REWARD))
    if not cond:
        return {}
    rows = (
        MetricPoint.objects.filter(FINITE)
        .filter(cond)
        .values("run_id")
        .annotate(best=Max("value"))
    )
    return {r["run_id"]: finite(r["best"]) for r in rows}


def latest_values(run: Run, keys: Iterable[str]) -> dict[str, tuple[int, float | None]]:
    """Each of ``keys`` the run logged: (its last step, its value there)."""
    out: dict[str, tuple[int, float | None]] = {}
    rows = MetricPoint.objects.filter(run=run, key__in=list(keys)).order_by("step")
    for key, step, value in rows.values_list("key", "step", "value"):
        out[key] = (step, finite(value))
    return out
