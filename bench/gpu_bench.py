"""GPU throughput of the trainer with a larger model config in bf16.

    python bench/gpu_bench.py [--size large|0.5b] [--steps 5] [--batch 16x8]
                              [--engine eager|compiled|continuous|reference]
                              [--no-lean] [--no-reserve] [--compile-update]
                              [--no-fused-head] [--no-master-weights] [--micro ROWS]
                              [--peak-tflops T]

Prints rollout (generated tokens/s) and update (trained tokens/s) throughput per step
and their medians, and the update's model FLOPs utilisation: 6 x parameters x trained
tokens per second (forward and backward, the usual convention: the attention's own
FLOPs and any extra scoring pass are not counted as useful work) over the device's
dense bf16 peak (a table of known devices, or ``--peak-tflops``). The goal for the
0.5b config on an H200 is at least 40%. ``--no-lean``: the eager and continuous
engines decode through the model's own forward instead of
``trainer.engines.lean`` (to compare the two on a device); ``--no-reserve``: the
eager engine's cache concatenates each token instead of writing into reserved room;
``--compile-update``: ``optim.compile`` (the update's layer parts compiled);
``--no-master-weights``: AdamW on the bf16 weights themselves, no float32 copies
(``optim.master_weights`` off: what the copies cost the update). Exits 0
with a 'skipped' line where there is no CUDA device, so it is safe to run anywhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Dense bf16 peak TFLOP/s (no sparsity) by a substring of torch.cuda.get_device_name().
PEAK_BF16_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,  # SXM; the PCIe card is lower: pass --peak-tflops 756
    "A100": 312.0,
    "L40S": 362.0,
    "RTX 4090": 165.0,
}


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a device by its name, None when unknown.

    >>> peak_tflops("NVIDIA H200"), peak_tflops("Some GPU")
    (989.0, None)
    """
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in device_name:
            return value
    return None


def mfu(num_params: int, tokens_per_s: float, peak: float) -> float:
    """Model FLOPs utilisation of training: 6 FLOPs per parameter per token
    (forward 2, backward 4) over the peak (TFLOP/s).

    >>> round(mfu(500_000_000, 100_000, 989.0), 3)
    0.303
    """
    return 6.0 * num_params * tokens_per_s / (peak * 1e12)


def main() -> int:
    ap = argparse.ArgumentParser()
    from trainer.models import MODEL_SIZES

    ap.add_argument("--size", default="large", choices=list(MODEL_SIZES))
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", default="16x8", help="tasks x group size")
    ap.add_argument("--env", default="search")
    ap.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="profile the third step (torch.profiler): its top CUDA kernels to PATH",
    )
    ap.add_argument(
        "--engine",
        default="eager",
        help="rollout.engine: eager, compiled, continuous, reference",
    )
    ap.add_argument(
        "--no-lean",
        action="store_true",
        help="decode through the model's forward, not trainer.engines.lean",
    )
    ap.add_argument(
        "--no-reserve",
        action="store_true",
        help="the eager engine's KV cache concatenated each token (transformers'), "
        "not written into reserved room",
    )
    ap.add_argument(
        "--compile-update",
        action="store_true",
        help="optim.compile: the update's layer parts torch.compiled",
    )
    ap.add_argument(
        "--micro",
        type=int,
        default=0,
        metavar="ROWS",
        help="optim.micro_batch_size: the update in micro-batches of ROWS rollouts "
        "(a batch bigger than one forward can hold)",
    )
    ap.add_argument(
        "--no-fused-head",
        action="store_true",
        help="optim.fused_head off: log-probs from the model's whole logits",
    )
    ap.add_argument(
        "--no-master-weights",
        action="store_true",
        help="optim.master_weights off: AdamW steps the bf16 weights themselves "
        "(small updates rounded away; no float32 copies)",
    )
    args = ap.parse_args()
    import torch

    from trainer.engines.eager import EagerEngine

    EagerEngine.lean = not args.no_lean  # the continuous engine inherits it
    EagerEngine.reserve_cache = not args.no_reserve

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
            "optim": {
                "compile": args.compile_update,
                "micro_batch_size": args.micro,
                "fused_head": not args.no_fused_head,
                "master_weights": not args.no_master_weights,
            },
            "rollout": {
                "tasks_per_step": tasks,
                "group_size": group,
                "max_turns": 6,
                "max_action_tokens": 16,
                "engine": args.engine,
            },
        }
    )
    rows: list[tuple[float, float, float]] = []
    params: list[int] = []

    class Collect(NullSink):
        def emit(self, ev):
            if ev["type"] == "run_started":
                params.append(int(ev["num_params"]))
                print(
                    f"model {args.size}: {ev['num_params'] / 1e6:.1f}M params on "
                    f"{ev['device']}, rollout engine {args.engine}"
                    f"{' (no lean)' if args.no_lean else ''}"
                    f"{' (no reserve)' if args.no_reserve else ''}"
                    f"{', update compiled' if args.compile_update else ''}"
                    f"{f', micro-batches of {args.micro}' if args.micro else ''}"
                    f"{', head unfused' if args.no_fused_head else ''}"
                    f"{', no master weights' if args.no_master_weights else ''}"
                )
            if ev["type"] == "step" and ev["step"] > 0:
                m = ev["metrics"]
                gen_tokens = m["completions/mean_length"] * tasks * group
                gen_tps = gen_tokens / m["timing_s/gen"]
                upd_tps = (
                    m["perf/tokens_per_s"] * m["timing_s/step"] / m["timing_s/update"]
                )
                rows.append((gen_tps, upd_tps, m["timing_s/step"]))
                trained = m["perf/tokens_per_s"] * m["timing_s/step"] / (tasks * group)
                print(
                    f"step {ev['step']}: rollout {gen_tps:9.0f} tok/s  update {upd_tps:9.0f} tok/s  "
                    f"step {m['timing_s/step']:.2f}s (gen {m['timing_s/gen']:.2f}s, "
                    f"update {m['timing_s/update']:.2f}s, "
                    f"{m['completions/mean_length']:.0f} generated, {trained:.0f} trained "
                    "tokens a rollout)"
                )
                if prof is not None:
                    prof.step()

    reward_fn = build_reward_fn(default_reward_config(args.env), env_name=args.env)
    prof = None
    if args.profile:
        from torch.profiler import ProfilerActivity, profile, schedule

        # Steps end with their event: step 2's event opens step 3, profiled whole.
        prof = profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=2, warmup=0, active=1, repeat=1),
        )
        prof.start()
    train(cfg, make_env(args.env, seed=0), reward_fn, Collect())
    if prof is not None:
        prof.stop()
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30)
        Path(args.profile).write_text(table)
        print(f"profile of step 3 written to {args.profile}")
    warm = rows[1:] or rows  # the first step pays for CUDA warm-up
    name = torch.cuda.get_device_name()
    update_tps = statistics.median(r[1] for r in warm)
    print(
        f"{name}: median rollout {statistics.median(r[0] for r in warm):.0f} "
        f"tok/s, median update {update_tps:.0f} tok/s, "
        f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
    )
    peak = args.peak_tflops or peak_tflops(name)
    if peak is None:
        print(f"update MFU: unknown peak for {name!r} (pass --peak-tflops)")
    else:
        print(
            f"update MFU {100 * mfu(params[0], update_tps, peak):.1f}% of {peak:.0f} "
            f"TFLOP/s bf16 ({params[0] / 1e6:.0f}M params)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
