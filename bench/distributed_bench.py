"""Step time of one process against several (torch.distributed, DDP or FSDP2) for one global batch.

    python bench/distributed_bench.py [--steps 4] [--processes 2] [--size tiny]
                                      [--strategy ddp|fsdp]
                                      [--tasks 8] [--group 4]

Runs the same seeded config through ``python -m trainer run`` with one process (all
cores to it, then one thread), then with ``--nproc-per-node N`` (torchrun: one thread a
process), and
prints the median step time (the trainer's ``timing_s/step`` of rank 0, which waits for
every rank at each collective; the first step is left out as warm-up), the medians of
generation and update, the whole command's wall time, and the ratios. On a CPU with few
cores expect little gain: the point is what the split and the collectives cost. Prints
numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config(args: argparse.Namespace) -> dict:
    return {
        "steps": args.steps,
        "seed": 0,
        "env": {"name": "calc"},
        "model": {"size": args.size, "device": "cpu"},
        "rollout": {"tasks_per_step": args.tasks, "group_size": args.group},
        "algorithm": {"preset": "grpo"},
        "resources": {"strategy": args.strategy},
    }


def _run(
    cfg_path: Path, out: Path, processes: int, threads: int | None = None
) -> dict[str, float]:
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", "trainer", "run", str(cfg_path), "--out", str(out)]
    if processes > 1:
        cmd += ["--nproc-per-node", str(processes)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    steps = [e["metrics"] for e in events if e["type"] == "step" and e["step"] > 1]
    return {
        "step": statistics.median(m["timing_s/step"] for m in steps),
        "gen": statistics.median(m["timing_s/gen"] for m in steps),
        "update": statistics.median(m["timing_s/update"] for m in steps),
        "wall": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per step (global)")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--strategy", default="ddp", choices=["ddp", "fsdp"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="distbench-") as tmp:
        cfg_path = Path(tmp) / "run.json"
        cfg_path.write_text(json.dumps(_config(args)))
        one = _run(cfg_path, Path(tmp) / "one", 1)
        single = _run(cfg_path, Path(tmp) / "single", 1, threads=1)
        many = _run(cfg_path, Path(tmp) / "many", args.processes)
    n = args.processes
    print(
        f"global batch: {args.tasks} tasks x {args.group} rollouts, model {args.size}, "
        f"{args.strategy}, "
        f"{args.steps} steps (medians over steps 2..{args.steps})"
    )
    # torchrun gives each process one thread; "1 proc, 1 thr" isolates what the
    # split itself buys from what thread oversubscription costs.
    head = ["1 proc", "1 proc, 1 thr", f"{n} procs", f"{n}p / 1p", f"{n}p / 1p1t"]
    print(f"{'':14s}" + "".join(f"{h:>15s}" for h in head))
    for key in ("step", "gen", "update", "wall"):
        label = "wall (all) s" if key == "wall" else f"{key} s"
        cells = [one[key], single[key], many[key]]
        cells += [many[key] / one[key], many[key] / single[key]]
        print(f"{label:14s}" + "".join(f"{c:15.3f}" for c in cells))


if __name__ == "__main__":
    main()
