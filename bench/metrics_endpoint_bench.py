"""The downsampled metrics endpoint on a run with 100k steps.

    DATABASE_URL=postgres://... SECRET_KEY=... python bench/metrics_endpoint_bench.py \
        [--steps 100000] [--keys 20] [--repeat 30]
    DASHBOARD_VAR_DIR=/tmp/bench-var python bench/metrics_endpoint_bench.py  # SQLite

Loads ``steps x keys`` metric points into one run (through the ingest, which keeps the
rollups), then times ``GET /api/runs/<id>/metrics?keys=...&points=1000`` (2, 5 and 8
keys, full range and a ``since_step`` tail) through the Django test client, on
whichever database is configured: PostgreSQL, or SQLite (the embedded default). Side
by side, the same requests reading the points themselves instead of the rollup levels
(what SQLite did before it kept rollups). Goal: under 100 ms.
"""

from __future__ import annotations

import argparse
import math
import time

from _django import new_run, percentile, setup


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    user = setup(require_postgres=False)
    from django.db import connection, transaction
    from django.test import Client

    from dashboard.ingest import writer

    run = new_run(user)
    names = ["reward", "kl"] + [f"metric/{i}" for i in range(args.keys - 2)]
    t0 = time.perf_counter()
    chunk = 5000
    for lo in range(1, args.steps + 1, chunk):
        points = {
            (s, k): math.sin(s / 100 + i) if (s + i) % 997 else math.nan
            for s in range(lo, min(lo + chunk, args.steps + 1))
            for i, k in enumerate(names)
        }
        with transaction.atomic():
            writer.insert_metrics(run.id, points)
    load_s = time.perf_counter() - t0
    with connection.cursor() as cur:
        # What autovacuum does to a finished run's tables.
        if connection.vendor == "postgresql":
            cur.execute("VACUUM ANALYZE dashboard_metricpoint")
            cur.execute("VACUUM ANALYZE dashboard_metricrollup")
        else:
            cur.execute("ANALYZE")
    run.last_step = args.steps
    run.save(update_fields=["last_step"])
    print(
        f"{connection.vendor}: loaded {args.steps * len(names):,} points in "
        f"{load_s:.1f}s"
    )

    client = Client(HTTP_HOST="localhost")  # production settings: a real host, HTTPS
    client.force_login(user)
    cases = {
        "2 keys, full range": {"keys": "reward,kl", "points": 1000},
        "5 keys, full range": {"keys": ",".join(names[:5]), "points": 1000},
        "8 keys, full range": {"keys": ",".join(names[:8]), "points": 1000},
        "2 keys, 2000 points": {"keys": "reward,kl", "points": 2000},
        "2 keys, since_step tail": {
            "keys": "reward,kl",
            "points": 1000,
            "since_step": args.steps - 5000,
        },
    }
    from dashboard.reads import metrics

    rollup_level = metrics._rollup_level

    def timed(query) -> tuple[list[float], int]:
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            r = client.get(f"/api/runs/{run.id}/metrics", query, secure=True)
            times.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, r.content[:200]
        return times, len(r.json()["series"]["reward"]["step"])

    for label, query in cases.items():
        times, buckets = timed(query)
        metrics._rollup_level = lambda *a: None  # the points themselves
        try:
            before, _ = timed(query) if args.repeat else ([], 0)
        finally:
            metrics._rollup_level = rollup_level
        print(
            f"{label:26s} p50 {percentile(times, 50):6.1f} ms  "
            f"p95 {percentile(times, 95):6.1f} ms  ({buckets} buckets/key)  | "
            f"from the points: p50 {percentile(before, 50):6.1f} ms  "
            f"p95 {percentile(before, 95):6.1f} ms  "
            f"(ratio {percentile(before, 50) / percentile(times, 50):.1f}x)"
        )


if __name__ == "__main__":
    main()
