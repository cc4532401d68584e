"""The SQL of the metric rollups (PostgreSQL): per key, level and bucket of steps, the
min, max and last value with their steps. Written by :mod:`dashboard.ingest`, read by
:mod:`dashboard.reads.metrics`; see ``models.MetricRollup``."""

from __future__ import annotations

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
