"""Turning trainer events into rows, and writing batches of rows idempotently.

Every writer is an upsert on the table's unique key, so writing the same batch twice,
or re-emitting steps after a resume, leaves exactly one row per key holding the
latest value. Metric points go through one ``INSERT ... SELECT FROM unnest(arrays)
ON CONFLICT DO UPDATE`` statement on PostgreSQL (one round trip per batch, no
per-row parameters); other backends use ``bulk_create(update_conflicts=True)``.
Callers run these inside a transaction; nothing here commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from dashboard import jsonsafe
from dashboard.ingest import arrays, bounds, fields, prompts, rollups
from dashboard.ingest.recording_policy import recorded
from dashboard.ingest.rollups import BUCKET_AGGREGATES, COLUMNS, MERGE, POINTS, UNNEST
from dashboard.ingest.sqlarrays import (
    float_array_literal,
    int_array_literal,
    text_array_literal,
)
from dashboard.jsonsafe import as_int
from dashboard.live.frames import FrameParts
from dashboard.models import (
    ROLLUP_SHIFTS,
    Alert,
    Checkpoint,
    CriticalPath,
    GroupPrompt,
    Judgement,
    MetricPoint,
    MetricRollup,
    Trajectory,
    metric_keys,
)
from trainer.recording_policy import RecordConfig

STEP_MODELS = (
    MetricPoint,
    Trajectory,
    GroupPrompt,
    Judgement,
    CriticalPath,
    Alert,
    Checkpoint,
)
_KEY_LIMIT = 200
log = logging.getLogger(__name__)


def store(
    run_id: Any,
    events: Iterable[dict[str, Any]],
    *,
    attempt: int = 0,
    supersede_on_start: bool = True,
    record: RecordConfig | None = None,
    seed: int = 0,
    alerted: Mapping[int, Iterable[int]] | None = None,
    stale_steps: set[int] | None = None,
) -> tuple[int, FrameParts]:
    """Write ``events`` in order (inside the caller's transaction): the one write path
    of the worker's sink and the HTTP ingest. Returns (rows written, what the next
    frame reports). A ``run_started`` first deletes the rows from its ``start_step`` on
    (``supersede_on_start``: a resumed attempt replays them). ``record``: the
    recording policy to apply first (external runs; our trainer applies it itself),
    keeping the groups alerts of the batch point at and ``alerted[step]``.
    ``stale_steps``: filled with the steps whose every metric point was already
    stored (a re-sent step; see :func:`upsert_metrics`)."""
    if record is not None:
        events = recorded(events, record, seed, alerted)
    rows, parts, batch = 0, FrameParts(), Batch()
    for ev in events:
        if ev.get("type") == "run_started":
            if supersede_on_start:
                rows += len(batch)
                write(run_id, batch, stale_steps)
                batch = Batch()
                supersede(run_id, fields.start_step_of(ev))
        else:
            ev = bounds.bounded(ev)  # no write path stores more than the limits
            if ev.get(bounds.CLIPPED):
                log.warning(
                    "run %s: an event cut to the limits: %s", run_id, ev[bounds.CLIPPED]
                )
            batch.add(run_id, ev, attempt)
            fields.summarise(ev, parts)
    rows += len(batch)
    write(run_id, batch, stale_steps)
    return rows, parts


def _float_or_none(value: Any) -> float | None:
    return None if value is None else jsonsafe.to_float(value)


@dataclass
class Batch:
    """Rows keyed by their unique key: a later event for the same key replaces the
    earlier one (PostgreSQL refuses to upsert one key twice in a statement)."""

    metrics: dict[tuple[int, str], float] = field(default_factory=dict)
    trajectories: dict[tuple, Trajectory] = field(default_factory=dict)
    segment_parts: dict[tuple, list[prompts.Part]] = field(default_factory=dict)
    judgements: dict[tuple, Judgement] = field(default_factory=dict)
    critical_paths: dict[tuple, CriticalPath] = field(default_factory=dict)
    alerts: dict[tuple, Alert] = field(default_factory=dict)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)

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
                self.metrics[(step, jsonsafe.text(key, _KEY_LIMIT))] = (
                    jsonsafe.to_float(value)
                )
        elif kind == "trajectory":
            row = trajectory_row(run_id, step, event)
            key = (step, row.group, row.index)
            self.trajectories[key] = row
            self.segment_parts[key] = row.segment_parts
        elif kind == "judgement":
            row = judgement_row(run_id, step, event)
            self.judgements[(step, row.group, row.index, row.judge)] = row
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
            self.critical_paths[(step, row.group, row.index)] = row
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
            self.alerts[(step, row.detector)] = row
        elif kind == "checkpoint":
            self.checkpoints[step] = Checkpoint(
                run_id=run_id,
                step=step,
                path=jsonsafe.text(event.get("path"), 1024),
                attempt=attempt,
            )


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


def write(run_id: Any, batch: Batch, stale_steps: set[int] | None = None) -> None:
    """Upsert every row of the batch (inside the caller's transaction)."""
    if batch.metrics:
        stale = upsert_metrics(
            run_id, batch.metrics, find_stale=stale_steps is not None
        )
        if stale_steps is not None:
            stale_steps.update(stale)
    if batch.trajectories:
        new = prompts.share(run_id, batch.trajectories, batch.segment_parts)
        GroupPrompt.objects.bulk_create(new, batch_size=200)
    _upsert(Trajectory, batch.trajectories.values(), ["run", "step", "group", "index"])
    _upsert(
        Judgement, batch.judgements.values(), ["run", "step", "group", "index", "judge"]
    )
    _upsert(
        CriticalPath, batch.critical_paths.values(), ["run", "step", "group", "index"]
    )
    _upsert(Alert, batch.alerts.values(), ["run", "step", "detector"])
    _upsert(Checkpoint, batch.checkpoints.values(), ["run", "step"])


def upsert_metrics(
    run_id: Any, points: dict[tuple[int, str], float], *, find_stale: bool = True
) -> set[int]:
    """Upsert the points and fold them into every rollup level; returns the steps
    whose every point was already stored (re-sent ones; on SQLite, a query skipped
    unless ``find_stale``)."""
    if connection.vendor != "postgresql":
        stale = _stale_steps_py(run_id, points) if find_stale else set()
        rows = [
            MetricPoint(run_id=run_id, step=s, key=k, value=v)
            for (s, k), v in points.items()
        ]
        MetricPoint.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "key", "step"],
            update_fields=["value"],
            batch_size=250,
        )
        _fold_rollups_py(run_id, ((k, s, v) for (s, k), v in points.items()))
        return stale
    steps, keys, values = [], [], []
    for (step, key), value in points.items():
        steps.append(step)
        keys.append(key)
        values.append(value)
    # One statement: the arrays are parsed once, the points upserted (each saying
    # whether it was new: xmax is 0 on an inserted row), and the batch folded into
    # every rollup level (per bucket: the smaller (value, step) pair, the larger one,
    # and the later (step, value) pair). The arrays travel as three array literals
    # built here: the driver's per-element quoting cost more than the SQL.
    with connection.cursor() as cur:
        cur.execute(
            "WITH t AS MATERIALIZED (SELECT * FROM unnest(%s::integer[], %s::varchar[], "
            "%s::double precision[]) AS t(s, k, v)), "
            f"p AS (INSERT INTO {MetricPoint._meta.db_table} (run_id, step, key, value) "
            "SELECT %s, s, k, v FROM t "
            "ON CONFLICT (run_id, key, step) DO UPDATE SET value = EXCLUDED.value "
            "RETURNING step, xmax = 0 AS fresh), "
            f"r AS (INSERT INTO {MetricRollup._meta.db_table} AS r {COLUMNS} "
            + " UNION ALL ".join(
                f"SELECT %s::uuid, k, {sh}, s >> {sh}, "
                f"{BUCKET_AGGREGATES.format(**UNNEST)} FROM t GROUP BY k, s >> {sh}"
                for sh in ROLLUP_SHIFTS
            )
            + f" ON CONFLICT (run_id, key, shift, bucket) DO UPDATE SET {MERGE}) "
            "SELECT step FROM p GROUP BY step HAVING NOT bool_or(fresh)",
            [
                int_array_literal(steps),
                text_array_literal(keys),
                float_array_literal(values),
                run_id,
            ]
            + [run_id] * len(ROLLUP_SHIFTS),
        )
        return {step for (step,) in cur.fetchall()}


def _stale_steps_py(run_id: Any, points: dict[tuple[int, str], float]) -> set[int]:
    by_step: dict[int, set[str]] = {}
    for step, key in points:
        by_step.setdefault(step, set()).add(key)
    found: dict[int, set[str]] = {}
    rows = MetricPoint.objects.filter(
        run_id=run_id, step__in=list(by_step), key__in={k for _, k in points}
    ).values_list("step", "key")
    for step, key in rows:
        found.setdefault(step, set()).add(key)
    return {s for s, keys in by_step.items() if keys <= found.get(s, set())}


def rebuild_rollup(
    run_id: Any, keys: list[str], first_step: int, last_step: int
) -> None:
    """Recompute, at every level, the rollup buckets covering [first_step, last_step]
    from the points."""
    if not keys:
        return
    if connection.vendor != "postgresql":
        _rebuild_rollup_py(run_id, keys, first_step, last_step)
        return
    for sh in ROLLUP_SHIFTS:
        lo, hi = first_step >> sh, last_step >> sh
        MetricRollup.objects.filter(
            run_id=run_id, key__in=keys, shift=sh, bucket__gte=lo, bucket__lte=hi
        ).delete()
        with connection.cursor() as cur:
            cur.execute(
                f"INSERT INTO {MetricRollup._meta.db_table} {COLUMNS} "
                f"SELECT run_id, key, {sh}, step >> {sh}, "
                f"{BUCKET_AGGREGATES.format(**POINTS)} "
                f"FROM {MetricPoint._meta.db_table} WHERE run_id = %s "
                "AND key = ANY(%s::varchar[]) AND step >= %s AND step < %s "
                f"GROUP BY run_id, key, step >> {sh}",
                [run_id, keys, lo << sh, (hi + 1) << sh],
            )


_ROLLUP_FIELDS = ["vmin", "smin", "vmax", "smax", "vlast", "slast"]


def _fold_rollups_py(
    run_id: Any, points: Iterable[tuple[str, int, float | None]]
) -> None:
    """The rollup upsert of :func:`upsert_metrics` without PostgreSQL (SQLite: the
    embedded default): this batch's buckets folded into the stored rows in Python."""
    batch = rollups.fold_points(points, ROLLUP_SHIFTS)
    if not batch:
        return
    keys = sorted({k for k, _, _ in batch})
    for sh in ROLLUP_SHIFTS:
        buckets = [b for k, s, b in batch if s == sh]
        stored = MetricRollup.objects.filter(
            run_id=run_id,
            key__in=keys,
            shift=sh,
            bucket__gte=min(buckets),
            bucket__lte=max(buckets),
        ).values_list("key", "bucket", *_ROLLUP_FIELDS)
        for key, bucket, *row in stored:
            mine = batch.get((key, sh, bucket))
            if mine is not None:
                batch[(key, sh, bucket)] = rollups.fold(row, mine)
    _write_rollups_py(run_id, batch)


def _write_rollups_py(run_id: Any, rows: dict[tuple[str, int, int], list]) -> None:
    MetricRollup.objects.bulk_create(
        [
            MetricRollup(
                run_id=run_id,
                key=key,
                shift=sh,
                bucket=bucket,
                **dict(zip(_ROLLUP_FIELDS, row, strict=True)),
            )
            for (key, sh, bucket), row in rows.items()
        ],
        update_conflicts=True,
        unique_fields=["run", "key", "shift", "bucket"],
        update_fields=_ROLLUP_FIELDS,
        batch_size=250,
    )


def _rebuild_rollup_py(
    run_id: Any, keys: list[str], first_step: int, last_step: int
) -> None:
    lo = first_step >> max(ROLLUP_SHIFTS) << max(ROLLUP_SHIFTS)
    hi = ((last_step >> max(ROLLUP_SHIFTS)) + 1) << max(ROLLUP_SHIFTS)
    for sh in ROLLUP_SHIFTS:
        MetricRollup.objects.filter(
            run_id=run_id,
            key__in=keys,
            shift=sh,
            bucket__gte=first_step >> sh,
            bucket__lte=last_step >> sh,
        ).delete()
    points = MetricPoint.objects.filter(
        run_id=run_id, key__in=keys, step__gte=lo, step__lt=hi
    ).values_list("key", "step", "value")
    rows = rollups.fold_points(points.iterator(chunk_size=5000), ROLLUP_SHIFTS)
    _write_rollups_py(
        run_id,
        {
            (k, sh, b): row
            for (k, sh, b), row in rows.items()
            if first_step >> sh <= b <= last_step >> sh
        },
    )


def _upsert(model: type, rows: Iterable[Any], unique: list[str]) -> None:
    rows = list(rows)
    if not rows:
        return
    update = [
        f.name
        for f in model._meta.concrete_fields
        if not f.primary_key and f.name not in unique and f.name != "created_at"
    ]
    model.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=unique,
        update_fields=update,
        batch_size=200,
    )


def supersede(run_id: Any, from_step: int) -> None:
    """Delete every row at ``step >= from_step``: a resumed attempt replays them."""
    keys = metric_keys(run_id)  # with the keys, each delete is an index range per key
    MetricPoint.objects.filter(
        run_id=run_id, key__in=keys, step__gte=from_step
    ).delete()
    for sh in ROLLUP_SHIFTS:
        MetricRollup.objects.filter(
            run_id=run_id, key__in=keys, shift=sh, bucket__gt=from_step >> sh
        ).delete()
    rebuild_rollup(run_id, keys, from_step, from_step)  # the buckets cut in two
    for model in STEP_MODELS:
        if model is not MetricPoint:
            model.objects.filter(run_id=run_id, step__gte=from_step).delete()
