"""Storage at rest of trajectories of a realistic shape, through the one write path.

    DATABASE_URL=postgres://.../agentic_rl_x SECRET_KEY=x python bench/storage_bench.py
    DATABASE_URL=sqlite:////tmp/storage.db SECRET_KEY=x python bench/storage_bench.py

A synthetic external run (issue 15's shape, scaled): ``--groups`` groups of 8 rollouts
a step, each a ``--prompt``-token prompt shared by its group then a
``--completion``-token completion, every per-token array filled. Its events go
through ``dashboard.ingest.writer.store`` under the recording policy (``--record``: the
default ``auto``, or ``all``); ``--no-share`` stores every prompt with every rollout
(the path before prompts were stored once). Prints bytes at rest per stored token
(trajectory + group-prompt tables, PostgreSQL ``pg_total_relation_size`` or SQLite
``dbstat``, over the tokens of the trajectories stored), trajectories/s, and the
trajectory page and step listing latency (median of 20 requests). ``--filler N``
first adds N small trajectories to another run so that the tables hold that many
rows (the latency at 1M stored trajectories). Prints, never asserts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from _django import new_run, setup


def events(step: int, groups: int, prompt: int, completion: int, rng):
    yield {"type": "step", "step": step, "metrics": {"reward": rng.random()}}
    for g in range(groups):
        p_ids = [rng.randrange(50_000) for _ in range(prompt)]
        p_seg = {
            "turn": 0,
            "kind": "prompt",
            "text": " ".join(f"w{t}" for t in p_ids),
            "token_ids": p_ids,
            "tokens": [f" w{t}" for t in p_ids],
            "logprob": [None] * prompt,
            "old_logprob": [None] * prompt,
            "ratio": [None] * prompt,
            "entropy": [None] * prompt,
            "advantage": [0.0] * prompt,
            "mask": "prompt",
        }
        reward = rng.random()
        for i in range(8):
            ids = [rng.randrange(50_000) for _ in range(completion)]
            lp = [-rng.random() * 3 for _ in range(completion)]
            yield {
                "type": "trajectory",
                "step": step,
                "group": g,
                "index": i,
                "reward": reward + rng.random() * 0.1,
                "advantage": rng.random() - 0.5,
                "length": completion,
                "segments": [
                    p_seg,
                    {
                        "turn": 0,
                        "kind": "action",
                        "text": " ".join(f"w{t}" for t in ids),
                        "token_ids": ids,
                        "tokens": [f" w{t}" for t in ids],
                        "logprob": lp,
                        "old_logprob": lp,
                        "ratio": [1.0] * completion,
                        "entropy": [rng.random() for _ in range(completion)],
                        "advantage": [reward - 0.5] * completion,
                        "mask": None,
                    },
                ],
            }


def table_bytes() -> int:
    from django.db import connection

    from dashboard.models import GroupPrompt, Trajectory

    tables = [Trajectory._meta.db_table, GroupPrompt._meta.db_table]
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(
                "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t",
                [tables],
            )
        else:  # pages of the tables and their indexes
            cur.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM "
                "sqlite_master WHERE tbl_name IN (%s, %s))",
                tables,
            )
        return int(cur.fetchone()[0] or 0)


def filler(user, n: int) -> None:
    """``n`` one-segment trajectories in a run of their own (bulk, not the path)."""
    from dashboard.models import Trajectory

    run = new_run(user)
    seg = [
        {"turn": 0, "kind": "action", "text": "x", "tokens": [], "mask": None, "n": 0}
    ]
    rows = []
    for k in range(n):
        rows.append(
            Trajectory(
                run=run, step=k // 256, group=k % 256 // 8, index=k % 8, segments=seg
            )
        )
        if len(rows) == 5000:
            Trajectory.objects.bulk_create(rows)
            rows = []
    Trajectory.objects.bulk_create(rows)


def latency(client, url: str) -> float:
    times = []
    for _ in range(20):
        t = time.perf_counter()
        r = client.get(url, secure=True)
        times.append(time.perf_counter() - t)
        assert r.status_code == 200, (url, r.status_code)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--groups", type=int, default=32, help="groups of 8 a step")
    ap.add_argument("--prompt", type=int, default=1000)
    ap.add_argument("--completion", type=int, default=500)
    ap.add_argument("--record", choices=("auto", "all"), default="auto")
    ap.add_argument("--no-share", action="store_true")
    ap.add_argument("--filler", type=int, default=0)
    args = ap.parse_args()
    user = setup(require_postgres=False)
    from django.db import connection, transaction
    from django.test import Client

    from dashboard.ingest import prompts, writer
    from dashboard.models import Trajectory
    from trainer.recording_policy import RecordConfig

    if args.no_share:  # the old path: every rollout keeps its whole prompt
        prompts.share = lambda run_id, rows, parts: []
    record = RecordConfig(groups="auto" if args.record == "auto" else None)
    if args.filler:
        t = time.perf_counter()
        filler(user, args.filler)
        print(f"filler: {args.filler:,} trajectories in {time.perf_counter() - t:.0f}s")
    run = new_run(user)
    before = table_bytes()
    rng = random.Random(0)
    t = time.perf_counter()
    for step in range(1, args.steps + 1):
        evs = list(events(step, args.groups, args.prompt, args.completion, rng))
        with transaction.atomic():
            writer.store(run.pk, evs, record=record, seed=0)
    seconds = time.perf_counter() - t
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("CHECKPOINT")
    stored = Trajectory.objects.filter(run=run).count()
    tokens = stored * (args.prompt + args.completion)
    size = table_bytes() - before
    sent = args.steps * args.groups * 8
    print(
        f"{connection.vendor}: {args.steps} steps x {args.groups} groups x 8 rollouts "
        f"({args.prompt}-token prompt + {args.completion}-token completion), "
        f"record={args.record}, prompts {'per rollout' if args.no_share else 'once'}"
    )
    print(f"  stored {stored:,} of {sent:,} trajectories, {tokens:,} tokens")
    print(f"  bytes at rest per stored token: {size / tokens:.1f} ({size:,} bytes)")
    print(
        f"  ingest: {sent / seconds:,.0f} trajectories sent/s, {stored / seconds:,.0f} stored/s"
    )
    from django.conf import settings

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(user)
    t0 = Trajectory.objects.filter(run=run).order_by("step", "group", "index").last()
    base = f"/runs/{run.pk}/trajectories/"
    page = latency(client, f"{base}{t0.step}/{t0.group}/{t0.index}/")
    listing = latency(client, f"{base}?step={t0.step}")
    total = Trajectory.objects.count()
    print(
        f"  with {total:,} trajectories stored: trajectory page {page:.0f} ms, "
        f"step listing {listing:.0f} ms (median of 20)"
    )


if __name__ == "__main__":
    main()
