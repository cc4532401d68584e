"""Writing batches of rows idempotently: the one write path of every event.

The first write wins: every row is keyed (run, step, key or group/index...), and a
key already stored is not written again, so writing the same batch twice stores it
once and a re-sent key with another value keeps what was stored first. What differed
is reported (:class:`~dashboard.ingest.conflicts.Outcome`), never applied silently.
A resumed attempt that replays steps first deletes them (``run_started``: :func:`supersede`).
Metric points go through one ``INSERT ... SELECT FROM unnest(arrays) ON CONFLICT DO
NOTHING`` statement on PostgreSQL (one round trip per batch, no per-row parameters),
which folds only the fresh points into the rollups; other backends insert what a
query found missing. Callers run these inside a transaction; nothing here commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection

from dashboard import jsonsafe
from dashboard.ingest import bounds, conflicts, fields, prompts, rollups, webhooks
from dashboard.ingest.recording_policy import recorded
from dashboard.ingest.rollups import BUCKET_AGGREGATES, COLUMNS, MERGE, POINTS, UNNEST
from dashboard.ingest.rows import Batch
from dashboard.ingest.sqlarrays import (
    float_array_literal,
    int_array_literal,
    text_array_literal,
)
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
    Run,
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
    outcome: conflicts.Outcome | None = None,
) -> tuple[int, FrameParts]:
    """Write ``events`` in order (inside the caller's transaction): the one write path
    of the worker's sink and the HTTP ingest. Returns (rows written, what the next
    frame reports). A ``run_started`` first deletes the rows from its ``start_step`` on
    (``supersede_on_start``: a resumed attempt replays them). ``record``: the
    recording policy to apply first (external runs; our trainer applies it itself),
    keeping the groups alerts of the batch point at and ``alerted[step]``.
    ``outcome``: filled with the re-sent steps and the conflicts (see
    :class:`conflicts.Outcome`)."""
    if record is not None:
        events = recorded(events, record, seed, alerted)
    rows, parts, batch = 0, FrameParts(), Batch()
    for ev in events:
        if ev.get("type") == "run_started":
            if supersede_on_start:
                rows += len(batch)
                write(run_id, batch, outcome)
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
    write(run_id, batch, outcome)
    if parts.warmup is not None:  # only the latest progress is kept
        Run.objects.filter(pk=run_id).update(warmup=parts.warmup)
    return rows, parts


def write(run_id: Any, batch: Batch, outcome: conflicts.Outcome | None = None) -> None:
    """Insert the batch's rows whose keys are not stored yet (inside the caller's
    transaction); what differed from the stored rows goes to ``outcome``."""
    outcome = outcome if outcome is not None else conflicts.Outcome()
    for kind, step, key, stored, sent in batch.conflicts:
        outcome.conflict(kind, step, key, stored, sent)
    if batch.metrics:
        insert_metrics(run_id, batch.metrics, outcome)
    trajectories = conflicts.fresh(run_id, Trajectory, batch.trajectories, outcome)
    if trajectories:
        parts = {k: batch.segment_parts[k] for k in trajectories}
        new = prompts.share(run_id, trajectories, parts)
        GroupPrompt.objects.bulk_create(new, batch_size=200)
    _insert(Trajectory, trajectories.values())
    for model, rows in (
        (Judgement, batch.judgements),
        (CriticalPath, batch.critical_paths),
        (Alert, batch.alerts),
        (Checkpoint, batch.checkpoints),
    ):
        fresh = list(conflicts.fresh(run_id, model, rows, outcome).values())
        _insert(model, fresh)
        if model is Alert:  # their owner's webhook, once committed
            webhooks.notify_on_commit(run_id, fresh)


def insert_metrics(
    run_id: Any,
    points: dict[tuple[int, str], float],
    outcome: conflicts.Outcome | None = None,
) -> None:
    """Insert the points not stored yet and fold those into every rollup level; the
    re-sent steps and the points re-sent with another value go to ``outcome``."""
    outcome = outcome if outcome is not None else conflicts.Outcome()
    if connection.vendor != "postgresql":
        _insert_metrics_py(run_id, points, outcome)
        return
    steps, keys, values = [], [], []
    for (step, key), value in points.items():
        steps.append(step)
        keys.append(key)
        values.append(value)
    # One statement: the arrays are parsed once, the points not stored yet inserted
    # and those (only) folded into every rollup level (per bucket: the smaller
    # (value, step) pair, the larger one, and the later (step, value) pair). Every
    # part of the statement sees the table as it was before it, so the join finds the
    # points stored earlier: a step none of whose points is fresh was re-sent, and a
    # stored value distinct from the sent one is a conflict. The arrays travel as
    # three array literals built here: the driver's per-element quoting cost more.
    table = MetricPoint._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            "WITH t AS MATERIALIZED (SELECT * FROM unnest(%s::integer[], %s::varchar[], "
            "%s::double precision[]) AS t(s, k, v)), "
            f"p AS (INSERT INTO {table} (run_id, step, key, value) "
            "SELECT %s, s, k, v FROM t ON CONFLICT (run_id, key, step) DO NOTHING "
            "RETURNING step AS s, key AS k, value AS v), "
            f"r AS (INSERT INTO {MetricRollup._meta.db_table} AS r {COLUMNS} "
            + " UNION ALL ".join(
                f"SELECT %s::uuid, k, {sh}, s >> {sh}, "
                f"{BUCKET_AGGREGATES.format(**UNNEST)} FROM p GROUP BY k, s >> {sh}"
                for sh in ROLLUP_SHIFTS
            )
            + f" ON CONFLICT (run_id, key, shift, bucket) DO UPDATE SET {MERGE}), "
            # The points not inserted (a hash anti-join with what was): only those
            # are looked up in the table, so a fresh batch costs no index probes.
            "o AS MATERIALIZED (SELECT t.s, t.k, t.v FROM t LEFT JOIN p "
            "ON p.s = t.s AND p.k = t.k WHERE p.s IS NULL) "
            "SELECT s, NULL, NULL, NULL FROM (SELECT s FROM t EXCEPT SELECT s FROM p) x "
            f"UNION ALL SELECT o.s, o.k, m.value, o.v FROM o JOIN {table} m "
            "ON m.run_id = %s AND m.key = o.k AND m.step = o.s "
            "WHERE m.value IS DISTINCT FROM o.v",
            [
                int_array_literal(steps),
                text_array_literal(keys),
                float_array_literal(values),
                run_id,
            ]
            + [run_id] * len(ROLLUP_SHIFTS)
            + [run_id],
        )
        for step, key, stored, sent in cur.fetchall():
            if key is None:
                outcome.stale_steps.add(step)
            else:
                outcome.conflict(
                    "step", step, {"key": key}, jsonsafe.num(stored), jsonsafe.num(sent)
                )


def _insert_metrics_py(
    run_id: Any, points: dict[tuple[int, str], float], outcome: conflicts.Outcome
) -> None:
    """:func:`insert_metrics` without PostgreSQL (SQLite: the embedded default)."""
    steps = [s for s, _ in points]
    stored = dict(
        (
            ((s, k), v)
            for s, k, v in MetricPoint.objects.filter(
                run_id=run_id,
                step__gte=min(steps),
                step__lte=max(steps),
                key__in={k for _, k in points},
            ).values_list("step", "key", "value")
        )
    )
    fresh = {sk: v for sk, v in points.items() if sk not in stored}
    for (step, key), value in points.items():
        if (step, key) in stored and not conflicts.same(stored[(step, key)], value):
            outcome.conflict(
                "step",
                step,
                {"key": key},
                jsonsafe.num(stored[(step, key)]),
                jsonsafe.num(value),
            )
    outcome.stale_steps.update(set(steps) - {s for s, _ in fresh})
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run_id=run_id, step=s, key=k, value=v)
            for (s, k), v in fresh.items()
        ],
        ignore_conflicts=True,
        batch_size=250,
    )
    _fold_rollups_py(run_id, ((k, s, v) for (s, k), v in fresh.items()))


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


def _fold_rollups_py(run_id: Any, points: Iterable[tuple[str, int, float]]) -> None:
    """The rollup fold of :func:`insert_metrics` without PostgreSQL (SQLite: the
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


def _insert(model: type, rows: Iterable[Any]) -> None:
    rows = list(rows)
    if rows:
        model.objects.bulk_create(rows, ignore_conflicts=True, batch_size=200)


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
