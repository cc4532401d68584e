"""The downsampled metrics endpoint on a run with 100k steps.

    DATABASE_URL=postgres://... SECRET_KEY=... python bench/metrics_endpoint_bench.py \
        [--steps 100000] [--keys 20] [--repeat 30]

Loads ``steps x keys`` metric points into one run, then times
``GET /api/runs/<id>/metrics?keys=...&points=1000`` (2 and 8 keys, full range and a
``since_step`` tail) through the Django test client. Goal: under 100 ms.
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
    user = setup()
    from django.db import connection, transaction
    from django.test import Client

    from dashboard import ingest

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
            ingest.upsert_metrics(run.id, points)
    load_s = time.perf_counter() - t0
    with connection.cursor() as cur:
        # What autovacuum does to a finished run's tables.
        cur.execute("VACUUM ANALYZE dashboard_metricpoint")
        cur.execute("VACUUM ANALYZE dashboard_metricrollup")
    run.last_step = args.steps
    run.save(update_fields=["last_step"])
    print(f"loaded {args.steps * len(names):,} points in {load_s:.1f}s")

    client = Client(HTTP_HOST="localhost")  # production settings: a real host, HTTPS
    client.force_login(user)
    cases = {
        "2 keys, full range": {"keys": "reward,kl", "points": 1000},
        "8 keys, full range": {"keys": ",".join(names[:8]), "points": 1000},
        "2 keys, 2000 points": {"keys": "reward,kl", "points": 2000},
        "2 keys, since_step tail": {
            "keys": "reward,kl",
            "points": 1000,
            "since_step": args.steps - 5000,
        },
    }
    for label, query in cases.items():
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            r = client.get(f"/api/runs/{run.id}/metrics", query, secure=True)
            times.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, r.content[:200]
        buckets = len(r.json()["series"]["reward"]["step"])
        print(
            f"{label:28s} p50 {percentile(times, 50):6.1f} ms  p95 {percentile(times, 95):6.1f} ms  "
            f"({buckets} buckets/key, goal < 100 ms)"
        )


if __name__ == "__main__":
    main()
