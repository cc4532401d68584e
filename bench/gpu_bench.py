"""GPU throughput of the trainer with a larger model config in bf16.

    python bench/gpu_bench.py [--size large] [--steps 5] [--batch 16x8]

Prints rollout (generated tokens/s) and update (trained tokens/s) throughput per step
and their medians. Exits 0 with a 'skipped' line where there is no CUDA device, so it
is safe to run anywhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--size", default="large", choices=["tiny", "small", "base", "large"]
    )
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", default="16x8", help="tasks x group size")
    ap.add_argument("--env", default="search")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_bench: skipped (no CUDA device visible)")
        return 0
    from rewards import build_reward_fn, default_reward_config
    from trainer.config import TrainConfig
    from trainer.envs.base import make_env
    from trainer.events import NullSink
    from trainer.loop import train

    tasks, group = (int(x) for x in args.batch.split("x"))
    cfg = TrainConfig.model_validate(
        {
            "steps": args.steps,
            "env": {"name": args.env},
            "model": {"size": args.size, "device": "cuda", "dtype": "bfloat16"},
            "rollout": {
                "tasks_per_step": tasks,
                "group_size": group,
                "max_turns": 6,
                "max_action_tokens": 16,
            },
        }
    )
    rows: list[tuple[float, float, float]] = []

    class Collect(NullSink):
        def emit(self, ev):
            if ev["type"] == "run_started":
                print(
                    f"model {args.size}: {ev['num_params'] / 1e6:.1f}M params on {ev['device']}"
                )
            if ev["type"] == "step" and ev["step"] > 0:
                m = ev["metrics"]
                gen_tokens = m["completions/mean_length"] * tasks * group
                gen_tps = gen_tokens / m["timing_s/gen"]
                upd_tps = (
                    m["perf/tokens_per_s"] * m["timing_s/step"] / m["timing_s/update"]
                )
                rows.append((gen_tps, upd_tps, m["timing_s/step"]))
                print(
                    f"step {ev['step']}: rollout {gen_tps:9.0f} tok/s  update {upd_tps:9.0f} tok/s  "
                    f"step {m['timing_s/step']:.2f}s"
                )

    reward_fn = build_reward_fn(default_reward_config(args.env), env_name=args.env)
    train(cfg, make_env(args.env, seed=0), reward_fn, Collect())
    warm = rows[1:] or rows  # the first step pays for CUDA warm-up
    print(
        f"{torch.cuda.get_device_name()}: median rollout {statistics.median(r[0] for r in warm):.0f} "
        f"tok/s, median update {statistics.median(r[1] for r in warm):.0f} tok/s, "
        f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
