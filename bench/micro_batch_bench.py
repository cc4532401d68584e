"""Gradient accumulation (``optim.micro_batch_size``): the update's memory and time.

    python bench/micro_batch_bench.py [--micro 0,16,4] [--steps 3] [--repeats 2]
                                      [--size small] [--batch 8x8] [--env search]
                                      [--warmstart 30]
    python bench/micro_batch_bench.py --micro 0,4,4:random   # grouped vs not
    python bench/micro_batch_bench.py --micro 0,16,t2048     # rows vs a token budget

Each micro-batch size trains the same seeded run in a fresh process, the sizes
interleaved (A B C, C B A, ...), and reports per run: the most memory one training
forward kept for its backward (``saved_mib``: the distinct storages autograd saved,
the parameters left out, counted through ``saved_tensors_hooks``: the activations
and float logits a forward holds until its backward frees them, what micro-batches
bound),
training forwards a step, the median update seconds of the steps after the first,
and each step's loss and gradient norm (the same update whatever the size, to float
rounding). A size written ``N:random`` takes the minibatch's rows into
micro-batches in their own (shuffled) order instead of a prompt's rows together,
shortest first (``trainer.accumulate.by_length``). A size written ``tN`` is a
token budget instead (``optim.micro_batch_tokens: N``: a micro-batch's rows times
its longest at most). Runs warm-start first (``--warmstart`` behaviour-cloning steps), so that
rewards differ within a group and the update has a gradient. Medians over the
repeats and ratios to the whole minibatch (``0``) are printed last. On a GPU
(``--device cuda``) also ``cuda_peak_mib``: ``torch.cuda.max_memory_allocated``
during step 1's update above what was allocated when it began (used for the ratios
there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _Saved:
    """Bytes autograd saves for the backward in each training forward (distinct
    storages, parameters left out): the activations a forward holds until its
    backward frees them."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self._seen: set[int] = set()
        self._params: set[int] = set()

    def pack(self, t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in self._seen | self._params:
            self._seen.add(storage.data_ptr())
            self.calls[-1] += storage.nbytes()
        return t

    def wrap(self, fn, hooks):
        def call(learner, *a, **kw):
            # The parameters' storages (views of them are saved too): held
            # whatever the batch.
            self._params = {
                p.untyped_storage().data_ptr() for p in learner.policy.parameters()
            }
            self.calls.append(0)
            self._seen = set()
            with hooks(self.pack, lambda t: t):
                return fn(learner, *a, **kw)

        return call


def child(args: argparse.Namespace) -> None:
    """One run in this process: prints its numbers as one JSON line."""
    sys.path.insert(0, str(ROOT))
    import torch

    import trainer.accumulate as accumulate
    import trainer.step as step_mod
    import trainer.update as update_mod
    from rewards import build_reward_fn, default_reward_config
    from trainer.config import TrainConfig
    from trainer.envs.base import make_env
    from trainer.events import ListSink
    from trainer.loop import train

    torch.set_num_threads(args.threads)
    size, _, order = args.run.partition(":")
    tokens = int(size[1:]) if size.startswith("t") else 0
    size = "0" if tokens else size
    accumulate.GROUPED = order != "random"
    tasks, group = (int(x) for x in args.batch.split("x"))
    cfg = TrainConfig.model_validate(
        {
            "steps": args.steps,
            "seed": 0,
            "env": {"name": args.env},
            "model": {
                "size": args.size,
                "device": args.device,
                # Behaviour cloning first: rewards that differ within a group, so
                # the update has a gradient to compare.
                "warmstart_steps": args.warmstart,
            },
            "rollout": {"tasks_per_step": tasks, "group_size": group, "max_turns": 4},
            "optim": {"micro_batch_size": int(size), "micro_batch_tokens": tokens},
        }
    )
    cuda = args.device == "cuda"
    saved = _Saved()
    update_mod._forward_backward = saved.wrap(
        update_mod._forward_backward, torch.autograd.graph.saved_tensors_hooks
    )
    real, peak = step_mod.optimise, []

    def optimise(*a, **kw):  # step 1's update: the device's peak above its start
        if peak or not cuda:
            return real(*a, **kw)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        try:
            return real(*a, **kw)
        finally:
            torch.cuda.synchronize()
            peak.append(torch.cuda.max_memory_allocated() - base)

    step_mod.optimise = optimise
    sink = ListSink()
    reward = build_reward_fn(default_reward_config(args.env), env_name=args.env)
    result = train(cfg, make_env(args.env, seed=0), reward, sink)
    assert result.status == "succeeded", result
    steps = [e["metrics"] for e in sink.of_type("step")]
    print(
        json.dumps(
            {
                "micro_batch_size": args.run,
                "saved_mib": max(saved.calls) / 2**20,
                "cuda_peak_mib": peak[0] / 2**20 if peak else None,
                "forwards_a_step": len(saved.calls) // args.steps,
                "update_s": statistics.median(m["timing_s/update"] for m in steps[1:]),
                "loss": [m["loss"] for m in steps],
                "grad_norm": [m["grad_norm"] for m in steps],
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--micro",
        default="0,16,4",
        help="sizes to compare, 0 first; SIZE:random takes the minibatch's rows "
        "in its own order, not grouped by prompt and sorted by length; tN: a "
        "budget of N tokens (optim.micro_batch_tokens)",
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", default="8x8", help="tasks x group size")
    ap.add_argument("--env", default="search")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmstart", type=int, default=30)
    ap.add_argument("--run", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run is not None:
        child(args)
        return
    sizes = args.micro.split(",")
    runs: dict[str, list[dict]] = {s: [] for s in sizes}
    for r in range(args.repeats):
        for size in sizes if r % 2 == 0 else sizes[::-1]:
            cmd = [sys.executable, __file__, *sys.argv[1:], "--run", size]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            line = json.loads(out.stdout.strip().splitlines()[-1])
            runs[size].append(line)
            print(json.dumps(line), flush=True)
    base = sizes[0]
    key = "cuda_peak_mib" if args.device == "cuda" else "saved_mib"
    peak0 = statistics.median(x[key] for x in runs[base])
    time0 = statistics.median(x["update_s"] for x in runs[base])
    for size in sizes:
        peak = statistics.median(x[key] for x in runs[size])
        secs = statistics.median(x["update_s"] for x in runs[size])
        print(
            f"micro_batch_size={size:<9} {key} {peak:8.1f} MiB "
            f"(x{peak / max(peak0, 1e-9):.2f})  update {secs:.3f} s "
            f"(x{secs / time0:.2f})  batch={args.batch} size={args.size} "
            f"env={args.env} device={args.device}"
        )


if __name__ == "__main__":
    main()
