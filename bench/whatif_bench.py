"""What-if reweighting: server time to recompute 10,000 stored trajectories.

    python bench/whatif_bench.py [--trajectories 10000] [--group-size 8]   # SQLite
    DATABASE_URL=postgres://... python bench/whatif_bench.py                # PostgreSQL

Stores a swarm run (5 reward components, 2 agent steps, realistic segments with text
and 64 tokens of packed arrays each), then times ``dashboard.reads.whatif.whatif`` with
``r_parallel`` set to 0 over every step: the database read and the recomputation
separately, median of 5 (wall clock, and this process's CPU time: on a loaded machine
the wall clock includes waiting for a core). Goal: under 1 s on both databases. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from _django import setup

TOKENS = 64


def events(n: int, G: int, components: list, rng: random.Random):
    from rewards.schedule import weight_at

    per_step_groups = 25
    for i in range(n):
        step, rest = divmod(i, per_step_groups * G)
        group, index = divmod(rest, G)
        per_step = {
            c.key: [
                weight_at(c.weight, c.schedule, step) * rng.choice((0.0, 0.5, 1.0))
                for _ in range(2)
            ]
            for c in components
        }
        comps = {k: sum(v) for k, v in per_step.items()}
        seg = {
            "turn": 0,
            "kind": "action",
            "text": "call search " * 10,
            "token_ids": list(range(TOKENS)),
            "tokens": ["tok"] * TOKENS,
            "mask": None,
            "advantage": [0.1] * TOKENS,
        }
        yield {
            "type": "trajectory",
            "step": step + 1,
            "group": group,
            "index": index,
            "task_id": f"task-{step}-{group}",
            "reward": sum(comps.values()),
            "advantage": 0.0,
            "rewards": {
                "total": sum(comps.values()),
                "components": comps,
                "per_step": per_step,
            },
            "num_turns": 2,
            "length": 2 * TOKENS,
            "facts": {"action_tokens": [TOKENS, TOKENS], "success": True},
            "steps": [{"index": 0, "action": "search x", "observation": "y" * 200}],
            "segments": [seg, {**seg, "turn": 1}],
        }


def profile(run) -> None:
    """Where one what-if's time goes, in this process's CPU seconds (the wall clock
    of a loaded machine mostly measures waiting for a core): the SQL alone (rows as
    the driver returns them), the same rows through Django's converters, the rows
    into rollouts, the whole report, its JSON; then cProfile's top functions."""
    import cProfile
    import json
    import pstats

    from django.core.serializers.json import DjangoJSONEncoder
    from django.db import connection

    from dashboard.models import Trajectory
    from dashboard.reads import whatif

    qs = Trajectory.objects.filter(run=run).values_list(
        "step", "group", "index", "task_id", "dropped", "truncated", "length",
        "rewards", "facts__action_tokens",
    )  # fmt: skip
    sql, params = qs.query.sql_with_params()

    def cpu(fn):
        best = None
        for _ in range(3):
            c0 = time.process_time()
            out = fn()
            c = time.process_time() - c0
            best = c if best is None else min(best, c)
        return best, out

    def raw_sql():
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    t_sql, raw = cpu(raw_sql)
    t_django, _ = cpu(lambda: list(qs.all()))
    t_load, rows = cpu(lambda: whatif.load_rollouts(run, None))
    t_all, report = cpu(lambda: whatif.whatif(run, {"r_parallel": 0}))
    t_json, body = cpu(lambda: json.dumps(report, cls=DjangoJSONEncoder))
    print(
        f"profile (CPU s, best of 3): SQL alone {t_sql:.3f} ({len(raw)} rows), "
        f"through Django {t_django:.3f}, into rollouts {t_load:.3f}, "
        f"whole what-if {t_all:.3f} (math {t_all - t_load:.3f}), "
        f"JSON answer {t_json:.3f} ({len(body)} bytes)"
    )
    prof = cProfile.Profile(time.process_time)
    prof.runcall(whatif.whatif, run, {"r_parallel": 0})
    pstats.Stats(prof).sort_stats("tottime").print_stats(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=10_000)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="first say where one what-if's time goes: the SQL alone, the rows "
        "into Python, the math, the JSON of the answer, and cProfile's top functions",
    )
    args = ap.parse_args()
    user = setup(require_postgres=False)
    from django.db import connection

    from dashboard.ingest import writer
    from dashboard.models import Run
    from dashboard.reads import whatif
    from dashboard.runs import services

    G = args.group_size
    run = Run.objects.create(
        owner=user,
        name="whatif-bench",
        status="succeeded",
        queue="cpu",
        config=services.check_config(
            {
                "name": "whatif-bench",
                "env": {"name": "swarm"},
                "algorithm": {"preset": "grpo"},
                "rollout": {"tasks_per_step": 25, "group_size": G},
            }
        ).model_dump(mode="json"),
    )
    _, _, rcfg, _ = whatif.run_setup(run)
    rng = random.Random(0)
    batch = writer.Batch()
    for k, ev in enumerate(events(args.trajectories, G, list(rcfg.components), rng)):
        batch.add(run.id, ev)
        if k % 2000 == 1999:
            writer.write(run.id, batch)
            batch = writer.Batch()
    writer.write(run.id, batch)

    if args.profile:
        profile(run)
    load, total, cpu = [], [], []
    for _ in range(5):
        t0 = time.perf_counter()
        rows = whatif.load_rollouts(run, None)
        load.append(time.perf_counter() - t0)
        t0, c0 = time.perf_counter(), time.process_time()
        report = whatif.whatif(run, {"r_parallel": 0})
        total.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    t = report["total"]
    print(
        f"{connection.vendor}: {len(rows)} trajectories, {t['groups']} groups of {G}: "
        f"whatif {statistics.median(total):.3f} s median "
        f"({statistics.median(cpu):.3f} s CPU in this process) "
        f"(read {statistics.median(load):.3f} s), "
        f"{t['sign_flips']} sign flips, {t['best_changes']} best changes"
    )


if __name__ == "__main__":
    main()
