"""Learning, not only running: each environment's demo config, trained from scratch.

    python bench/learning.py [calc search swarm calc_gspo calc_dapo] [--minutes 10]
        [--threads 2] [--set optim.minibatches=4 ...] [--warm-cache DIR]

For every demo config named (``bench/configs/<name>.yaml``; ``calc_gspo`` and
``calc_dapo`` are calc with the gspo and dapo presets) this trains the default model on
the CPU (warm start included in the time budget) and prints the mean reward of the
first 20 and the last 20 RL steps, the reward's range (worked out from the config's
components, see RANGES), and whether the gain reaches a quarter of that range. A run
that hits the time budget stops there and is judged on the steps it made.

``--warm-cache DIR``: the warm start is done once per (environment, model, seed,
warm-start settings) and kept in DIR (a checkpoint after the warm start and one RL
step of the config that made it); every run then starts from those weights and its
budget is RL steps only. Comparisons of variants (grpo vs gspo, truncated vs masked
IS) then start from the very same weights, and a loaded machine does not spend the
whole budget warming up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The reward range of each demo config, from its components' ranges times weights:
# calc: outcome in [0, 1] (0.5 partial credit) + format in [0, 0.1].
# search: fbeta [0, 1] + 0.2 * trajectory_recall [0, 1] + single_search_exit_penalty
#   [-0.2, 0] + format [0, 0.05].
# swarm: r_perf [0, 1] + format [0, 0.05].
# dataset_arith: numeric_match [0, 1] (0.5 tool credit) + format [0, 0.1].
RANGES = {
    "calc": (0.0, 1.1),
    "search": (-0.2, 1.25),
    "swarm": (0.0, 1.05),
    "dataset": (0.0, 1.1),
}


class Recorder:
    def __init__(self, budget_s: float) -> None:
        self.rewards: list[float] = []
        self.success: list[float] = []
        self.start = time.perf_counter()
        self.budget_s = budget_s
        self.alerts: list[str] = []
        # The sampler/learner numbers of runs with a rollout correction, per step.
        self.correction: dict[str, list[float]] = {}

    def emit(self, ev) -> None:
        if ev["type"] == "step" and ev["step"] > 0:
            self.rewards.append(ev["metrics"]["reward"])
            for key, value in ev["metrics"].items():
                if key.startswith(("rollout_correction/", "rollout/ratio_m")):
                    self.correction.setdefault(key, []).append(value)
            self.success.append(ev["metrics"].get("success/mean", float("nan")))
            if ev["step"] % 25 == 0:
                recent = self.rewards[-25:]
                print(
                    f"  step {ev['step']:4d}  {time.perf_counter() - self.start:6.1f}s  "
                    f"reward(last 25) {sum(recent) / len(recent):.3f}",
                    flush=True,
                )
        elif ev["type"] == "alert":
            self.alerts.append(f"step {ev['step']}: {ev['detector']}")

    def should_stop(self) -> bool:
        return time.perf_counter() - self.start > self.budget_s

    def close(self) -> None:
        pass


def with_overrides(cfg, overrides: list[str]):
    """``cfg`` with each ``dotted.key=value`` (a YAML value) set, validated again."""
    import yaml

    from trainer.config import TrainConfig

    data = cfg.model_dump(mode="json")
    for item in overrides:
        path, _, raw = item.partition("=")
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = yaml.safe_load(raw)
    return TrainConfig.model_validate(data)


def warm_checkpoint(cfg, cache: Path) -> Path:
    """The cached warm-started weights for ``cfg`` (made on first use), keyed by
    what the warm start depends on."""
    import hashlib

    from trainer.checkpoint import latest_checkpoint
    from trainer.events import NullSink
    from trainer.runner import run_from_config

    m = cfg.model
    # The warm start plays the environment (its parameters) for up to max_turns.
    made_of = json.dumps(
        [cfg.env.model_dump(mode="json"), cfg.rollout.max_turns], sort_keys=True
    )
    key = (
        f"{cfg.env.name}-{m.size}-s{cfg.seed}-w{m.warmstart_steps}-"
        f"b{m.warmstart_batch}-lr{m.warmstart_lr:g}-"
        f"{hashlib.sha256(made_of.encode()).hexdigest()[:8]}"
    )
    where = cache / key
    found = latest_checkpoint(where) if where.exists() else None
    if found is None:
        print(f"  warm start into {where} ...", flush=True)
        t0 = time.perf_counter()
        one = cfg.model_copy(update={"steps": 1})
        run_from_config(one, NullSink(), checkpoint_dir=where)
        found = latest_checkpoint(where)
        print(f"  warm start done in {time.perf_counter() - t0:.0f}s", flush=True)
    return found


def run_one(
    name: str, minutes: float, overrides: list[str] = (), cache: Path | None = None
) -> dict:
    from trainer.cli import load_config_file
    from trainer.runner import run_from_config

    if name == "dataset_arith" and not (ROOT / "var/data/arith.jsonl").exists():
        from bench.make_arith_dataset import main as make_arith

        make_arith(["--out", str(ROOT / "var/data/arith.jsonl")])
    cfg = load_config_file(str(ROOT / "bench" / "configs" / f"{name}.yaml"))
    if overrides:
        cfg = with_overrides(cfg, list(overrides))
        name = f"{name}[{','.join(overrides)}]"
    env = cfg.env.name
    init = warm_checkpoint(cfg, cache) if cache is not None else None
    rec = Recorder(minutes * 60)
    print(
        f"{name}: {cfg.steps} steps max, preset {cfg.algorithm.preset}, "
        f"warm start {cfg.model.warmstart_steps} steps"
        + (f" (cached: {init})" if init is not None else ""),
        flush=True,
    )
    run_from_config(cfg, rec, should_stop=rec.should_stop, init_checkpoint=init)
    r = rec.rewards
    # Ranges are the environment's task reward; dapo's overlong penalty ([-1, 0]) is
    # left out of the range, so its gain is judged on the same scale as grpo's.
    first, last = sum(r[:20]) / 20, sum(r[-20:]) / 20
    lo, hi = RANGES[env]
    gain = last - first
    return {
        "env": name,
        "steps": len(r),
        "seconds": round(time.perf_counter() - rec.start, 1),
        "first20": round(first, 3),
        "last20": round(last, 3),
        "gain": round(gain, 3),
        "range": [lo, hi],
        "gain_over_range": round(gain / (hi - lo), 3),
        # The share of rollouts that solved their task (the environment's own
        # success, outside any reward shaping), first 20 and last 20 steps.
        "success": [
            round(sum(rec.success[:20]) / 20, 3),
            round(sum(rec.success[-20:]) / 20, 3),
        ],
        "passes": gain >= (hi - lo) / 4,
        # Means over the run's steps (max: the largest) of the correction's numbers.
        "correction": {
            k: round(max(v) if k.endswith("max") else sum(v) / len(v), 6)
            for k, v in rec.correction.items()
        },
        "alerts": rec.alerts[:10],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("envs", nargs="*", default=["calc", "search", "swarm"])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value in every run, e.g. --set optim.minibatches=4",
    )
    ap.add_argument(
        "--warm-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="warm start once per environment/model/seed, kept in DIR; every run "
        "starts from it and its budget is RL steps only",
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    results = [
        run_one(env, args.minutes, args.set, args.warm_cache) for env in args.envs
    ]
    print()
    print(
        f"{'config':8s} {'steps':>5s} {'secs':>7s} {'first20':>8s} {'last20':>8s} "
        f"{'gain':>7s} {'range':>12s} {'gain/range':>10s}  pass"
    )
    for r in results:
        print(
            f"{r['env']:8s} {r['steps']:5d} {r['seconds']:7.1f} {r['first20']:8.3f} "
            f"{r['last20']:8.3f} {r['gain']:7.3f} {str(r['range']):>12s} "
            f"{r['gain_over_range']:10.3f}  {'yes' if r['passes'] else 'NO'}  "
            f"success {r['success'][0]:.3f} -> {r['success'][1]:.3f}"
        )
    print(json.dumps(results))
    return 0 if all(r["passes"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
