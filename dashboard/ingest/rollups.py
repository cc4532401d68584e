"""The SQL of the metric rollups (PostgreSQL): per key, level and bucket of steps, the
min, max and last value with their steps. Written by :mod:`dashboard.ingest.writer`, read by
:mod:`dashboard.reads.metrics`; see ``models.MetricRollup``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

COLUMNS = "(run_id, key, shift, bucket, vmin, smin, vmax, smax, vlast, slast)"
# Per bucket: the smallest (value, step) pair, the largest one, and the latest
# (step, value) pair, as six columns. min/max of ARRAY[value, step] is an argmin/argmax
# without a sort (arrays compare element by element); NaN sorts above every number in
# PostgreSQL, so a bucket holding NaN reports it as its max: a diverged bucket stays
# visible. Over points every placeholder is ``value`` or ``step``; over rollup rows
# they are the rollup's own columns (``POINTS``, ``ROLLUPS``).
BUCKET_AGGREGATES = (
    "(min(ARRAY[{vmin}, {smin}]))[1], (min(ARRAY[{vmin}, {smin}]))[2]::int, "
    "(max(ARRAY[{vmax}, {smax}]))[1], (max(ARRAY[{vmax}, {smax}]))[2]::int, "
    "(max(ARRAY[{slast}, {vlast}]))[2], max({slast})"
)
POINTS = dict(
    vmin="value", smin="step", vmax="value", smax="step", vlast="value", slast="step"
)
ROLLUPS = dict(
    vmin="vmin", smin="smin", vmax="vmax", smax="smax", vlast="vlast", slast="slast"
)
UNNEST = dict(vmin="v", smin="s", vmax="v", smax="s", vlast="v", slast="s")
_LT = "(EXCLUDED.vmin, EXCLUDED.smin) < (r.vmin, r.smin)"
_GT = "(EXCLUDED.vmax, EXCLUDED.smax) > (r.vmax, r.smax)"
MERGE = (
    f"vmin = CASE WHEN {_LT} THEN EXCLUDED.vmin ELSE r.vmin END, "
    f"smin = CASE WHEN {_LT} THEN EXCLUDED.smin ELSE r.smin END, "
    f"vmax = CASE WHEN {_GT} THEN EXCLUDED.vmax ELSE r.vmax END, "
    f"smax = CASE WHEN {_GT} THEN EXCLUDED.smax ELSE r.smax END, "
    "vlast = CASE WHEN EXCLUDED.slast >= r.slast THEN EXCLUDED.vlast ELSE r.vlast END, "
    "slast = GREATEST(EXCLUDED.slast, r.slast)"
)


# --- the same merge in Python (SQLite) -------------------------------------------------
def _order(value: float, step: int) -> tuple:
    """PostgreSQL's order of ARRAY[value, step]: NaN above numbers (and equal to NaN)."""
    if math.isnan(value):
        return (1, 0.0, step)
    return (0, value, step)


def fold(acc: list | None, row: Sequence[Any]) -> list:
    """Merge ``row`` = (vmin, smin, vmax, smax, vlast, slast) into ``acc`` (a list of
    the same six, or None): the smaller (value, step) pair, the larger one, the later
    (step, value) pair; a point is the row (v, s, v, s, v, s)."""
    if acc is None:
        return list(row)
    if _order(row[0], row[1]) < _order(acc[0], acc[1]):
        acc[0], acc[1] = row[0], row[1]
    if _order(row[2], row[3]) > _order(acc[2], acc[3]):
        acc[2], acc[3] = row[2], row[3]
    if row[5] >= acc[5]:
        acc[4], acc[5] = row[4], row[5]
    return acc


def fold_points(
    points: Iterable[tuple[str, int, float]], shifts: Iterable[int]
) -> dict[tuple[str, int, int], list]:
    """Per (key, shift, bucket): the rollup row of these (key, step, value) points."""
    shifts = tuple(shifts)
    out: dict[tuple[str, int, int], list] = {}
    for key, step, value in points:
        row = (value, step, value, step, value, step)
        for sh in shifts:
            k = (key, sh, step >> sh)
            out[k] = fold(out.get(k), row)
    return out
