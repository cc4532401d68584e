"""Ingestion into PostgreSQL: metric points/s and trajectories/s.

    DATABASE_URL=postgres://... SECRET_KEY=... python bench/ingest_bench.py \
        [--steps 20000] [--keys 50] [--trajectories 2000] [--tokens 256]

Compares, on fresh runs in the same process and database:

* ``RunSink`` end to end (the worker's path: buffer, writer thread, fenced
  transaction, idempotent first-write-wins inserts, frames),
* ``writer.insert_metrics`` alone (one ``INSERT ... SELECT unnest ... ON CONFLICT DO NOTHING``
  per batch),
* plain ``bulk_create`` of the same rows (no conflict handling: not idempotent),

and trajectories with ``--tokens`` tokens each (packed arrays) through the sink vs
plain ``bulk_create``. Goal: at least 100k metric points/s.
"""

from __future__ import annotations

import argparse
import math
import time

from _django import new_run, setup


def metric_events(steps: int, keys: int):
    names = [f"metric/{i}" for i in range(keys)]
    for step in range(1, steps + 1):
        yield {
            "type": "step",
            "step": step,
            "metrics": {k: math.sin(step + i) for i, k in enumerate(names)},
        }


def trajectory_events(n: int, tokens: int):
    for i in range(n):
        yield {
            "type": "trajectory",
            "step": 1 + i // 16,
            "group": (i % 16) // 4,
            "index": i % 4,
            "task_id": f"task-{i}",
            "dropped": False,
            "reward": 1.0,
            "advantage": 0.5,
            "rewards": {
                "total": 1.0,
                "components": {"outcome": 1.0},
                "per_step": {"outcome": [1.0]},
            },
            "num_turns": 2,
            "length": tokens,
            "truncated": False,
            "facts": {"success": True},
            "segments": [
                {
                    "turn": 0,
                    "kind": "action",
                    "text": "word " * (tokens // 2),
                    "token_ids": list(range(tokens // 2)),
                    "tokens": ["word"] * (tokens // 2),
                    "logprob": [-1.0] * (tokens // 2),
                    "old_logprob": [-1.0] * (tokens // 2),
                    "ratio": [1.0] * (tokens // 2),
                    "entropy": [0.5] * (tokens // 2),
                    "advantage": [0.5] * (tokens // 2),
                    "mask": None,
                }
                for _ in range(2)
            ],
        }


def claim_for(user):
    from dashboard.runs import lease

    run = new_run(user)
    run.status = "queued"
    run.save(update_fields=["status"])
    return lease.claim(run.id)


def time_sink(user, events) -> tuple[float, int]:
    from dashboard.runs.sinks import RunSink

    claim = claim_for(user)
    t = time.perf_counter()
    sink = RunSink(claim, interval_s=0.1)
    for event in events:
        sink.emit(event)
    sink.close()
    return time.perf_counter() - t, sink.rows_written


def _insert_all(run, args) -> float:
    """Seconds to write every point through ``writer.insert_metrics``, 20k a batch."""
    from django.db import transaction

    from dashboard.ingest import writer

    t = time.perf_counter()
    batch: dict = {}
    for event in metric_events(args.steps, args.keys):
        for k, v in event["metrics"].items():
            batch[(event["step"], k)] = v
        if len(batch) >= 20_000:
            with transaction.atomic():
                writer.insert_metrics(run.id, batch)
            batch = {}
    with transaction.atomic():
        writer.insert_metrics(run.id, batch)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--keys", type=int, default=50)
    ap.add_argument("--trajectories", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    user = setup()

    from dashboard.ingest import rows as rows_of
    from dashboard.models import MetricPoint, Trajectory

    n = args.steps * args.keys
    print(f"metric points: {args.steps:,} steps x {args.keys} keys = {n:,}")

    seconds, rows = time_sink(user, metric_events(args.steps, args.keys))
    print(
        f"  RunSink (end to end, idempotent)  {n / seconds:12,.0f} points/s  ({seconds:.1f}s)"
    )

    run = new_run(user)
    seconds = _insert_all(run, args)
    print(
        f"  insert_metrics (unnest, 20k/batch) {n / seconds:12,.0f} points/s  ({seconds:.1f}s)"
    )
    seconds = _insert_all(run, args)  # the same points again: every one a duplicate
    print(
        f"  insert_metrics, all re-sent        {n / seconds:12,.0f} points/s  ({seconds:.1f}s)"
    )

    run = new_run(user)
    t = time.perf_counter()
    objs = []
    for event in metric_events(args.steps, args.keys):
        objs.extend(
            MetricPoint(run=run, step=event["step"], key=k, value=v)
            for k, v in event["metrics"].items()
        )
        if len(objs) >= 20_000:
            MetricPoint.objects.bulk_create(objs, batch_size=5000)
            objs = []
    MetricPoint.objects.bulk_create(objs, batch_size=5000)
    seconds = time.perf_counter() - t
    print(
        f"  plain bulk_create (not idempotent) {n / seconds:12,.0f} points/s  ({seconds:.1f}s)"
    )

    print(f"trajectories: {args.trajectories:,} x {args.tokens} tokens")
    seconds, _ = time_sink(user, trajectory_events(args.trajectories, args.tokens))
    print(
        f"  RunSink (packed arrays, insert)    {args.trajectories / seconds:12,.0f} trajectories/s"
    )
    run = new_run(user)
    t = time.perf_counter()
    rows = [
        rows_of.trajectory_row(run.id, e["step"], e)
        for e in trajectory_events(args.trajectories, args.tokens)
    ]
    for i in range(0, len(rows), 200):
        Trajectory.objects.bulk_create(rows[i : i + 200])
    seconds = time.perf_counter() - t
    print(
        f"  plain bulk_create (packed arrays)  {args.trajectories / seconds:12,.0f} trajectories/s"
    )


if __name__ == "__main__":
    main()
