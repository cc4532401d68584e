"""The reward-hacking suite: labelled hacked and healthy runs, detection measured.

    python bench/hacking_suite.py [--quick] [--jobs 2] [--retrain] [--server]
        [--only NAME ...] [--dir var/bench/hacking] [--seed N]

Trains every case of ``bench/hacking_cases.py`` (each hack and the healthy runs: the
twins and every demo config) with the tiny model on the CPU, recording what the
detectors saw (``bench/hacking_record.py``); recordings already made are reused
(``--retrain`` makes them again). Then replays them through the current detectors
and prints, per hack: its onset (the step where its own statistic, the share of
rollouts labelled hacked, crosses its threshold and stays), the first alert of its
detectors, the delay, and the evidence precision (the share of the trajectories the
alert names that are labelled hacked); per healthy run: its steps and false alarms
(every alert), per 1,000 steps in all. ``--server`` replays every recording as an
external run through ``POST /api/runs/<id>/events`` (the detectors on the server)
and says whether the server raised the same alerts, naming the same trajectories.

``--quick``: a smoke run of the machinery sized for CI: one hack and its twin, a
few steps each from a short warm start (nothing is expected to be caught).

``--seed N``: every run trained with seed N (warm start included) instead of its
config's, recorded under ``<dir>-seed<N>``: the same suite on other draws, to see
whether the detectors' thresholds hold beyond the runs they were tuned on.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.hacking_cases import cases, healthy_runs  # noqa: E402

OUT = ROOT / "var" / "bench" / "hacking"
QUICK = {"steps": 6, "warmstart_steps": 20, "tasks_per_step": 2, "group_size": 4}


def plan(quick: bool, only: list[str], seed: int | None = None) -> dict[str, dict]:
    """Run name -> TrainConfig data: every hack, then every healthy run."""
    runs = {f"hack-{c.name}": c.hacked for c in cases()}
    runs.update(healthy_runs())
    if seed is not None:
        runs = {k: {**v, "seed": seed} for k, v in runs.items()}
    if quick:
        runs = {k: runs[k] for k in ("hack-length_hacking", "calc")}
        runs = {k: _shrink(v) for k, v in runs.items()}
    if only:
        unknown = sorted(set(only) - set(runs))
        if unknown:
            raise SystemExit(f"--only: no run named {unknown} (known: {sorted(runs)})")
        runs = {k: v for k, v in runs.items() if k in only}
    return runs


def _shrink(data: dict) -> dict:
    data = copy.deepcopy(data)
    data["steps"] = QUICK["steps"]
    data["model"] = {**data["model"], "warmstart_steps": QUICK["warmstart_steps"]}
    data["rollout"] = {
        **data["rollout"],
        "tasks_per_step": QUICK["tasks_per_step"],
        "group_size": QUICK["group_size"],
    }
    return data


def _worker(job: tuple[str, str, dict, str]) -> tuple[str, str]:
    import torch

    torch.set_num_threads(1)
    kind, name, data, out = job
    from bench.hacking_record import record_run, warm

    t0 = time.perf_counter()
    try:
        if kind == "warm":
            warm(data)
            return name, f"warm start ready ({time.perf_counter() - t0:.0f}s)"
        meta = record_run(name, data, Path(out) / f"{name}.jsonl.gz")
    except Exception as exc:  # noqa: BLE001 - one run failing leaves the others
        return name, f"FAILED: {type(exc).__name__}: {exc}"
    return name, f"{meta['steps']} steps in {meta['seconds']:.0f}s"


def record(runs: dict[str, dict], out: Path, jobs: int, retrain: bool) -> None:
    todo = {
        k: v for k, v in runs.items() if retrain or not (out / f"{k}.jsonl.gz").exists()
    }
    if not todo:
        return
    from bench.hacking_record import load_config
    from bench.learning import warm_checkpoint  # noqa: F401  (import check)

    # One warm start per distinct key first (two runs must not make one together).
    warms: dict[str, tuple] = {}
    for name, data in todo.items():
        cfg = load_config(data)
        key = (cfg.env.model_dump_json(), cfg.rollout.max_turns, cfg.seed,
               cfg.model.model_dump_json())  # fmt: skip
        warms.setdefault(str(key), ("warm", name, data, str(out)))
    _pool(list(warms.values()), jobs)
    _pool([("run", k, v, str(out)) for k, v in todo.items()], jobs)


def _pool(jobs_list: list, jobs: int) -> None:
    if jobs <= 1:
        for job in jobs_list:
            name, what = _worker(job)
            print(f"  {name}: {what}", flush=True)
        return
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(jobs) as pool:
        for name, what in pool.imap_unordered(_worker, jobs_list):
            print(f"  {name}: {what}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--retrain", action="store_true")
    ap.add_argument("--server", action="store_true")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--record-only", action="store_true")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument(
        "--slices", type=Path, help="write the tests' slices of the recordings here"
    )
    args = ap.parse_args(argv)
    out = args.dir or (OUT.with_name("hacking-quick") if args.quick else OUT)
    if args.seed is not None:
        out = out.with_name(f"{out.name}-seed{args.seed}")
    os.chdir(ROOT)  # the dataset demo's path is relative to the repository
    runs = plan(args.quick, args.only, args.seed)
    t0 = time.perf_counter()
    record(runs, out, args.jobs, args.retrain or args.quick)
    print(f"recordings in {out} ({time.perf_counter() - t0:.0f}s)", flush=True)
    if args.record_only:
        return 0
    from bench.hacking_measure import measure_dir, print_table

    table = measure_dir(out, list(runs))
    print_table(table)
    if args.slices:
        from bench.hacking_slices import write_slices

        print(f"slices in {args.slices}: {', '.join(write_slices(out, args.slices))}")
    if args.server:
        from bench.hacking_server import replay_dir

        ok = replay_dir(out, list(runs))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
