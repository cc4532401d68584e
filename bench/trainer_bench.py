"""Trainer throughput: rollout and update tokens/s, and the cost of full event capture.

    python bench/trainer_bench.py [--steps 6] [--repeats 3] [--size tiny]

Runs, side by side and interleaved (A B A B ...), the same seeded training run with
``NullSink`` (no records built) and with full capture (every event, per-token arrays,
serialised to JSON lines), and prints medians and the overhead of capture two ways: the
A/B difference of whole-run wall times, and the capture work timed in place inside the
full runs (the trainer's ``timing_s/records`` plus the time spent in the sink) over the
rest of the run (goal: under 3%). With ``--trl`` and TRL installed, also times one single-turn
GRPO step of TRL's GRPOTrainer on the same model size and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from trainer.config import TrainConfig  # noqa: E402
from trainer.envs.base import make_env  # noqa: E402
from trainer.events import JsonlSink, NullSink  # noqa: E402
from trainer.loop import train  # noqa: E402


def _config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "steps": args.steps,
            "seed": 0,
            "env": {"name": args.env},
            "model": {"size": args.size},
            "rollout": {"tasks_per_step": 8, "group_size": 8, "max_turns": 4},
            "algorithm": {"preset": "grpo"},
        }
    )


class Timing:
    """Wraps a sink, summing the trainer's own timings from the step events."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.gen = self.update = self.step = 0.0
        self.gen_tokens = self.update_tokens = 0
        # What capture costs, timed where it happens: the trainer building the
        # records (its timing_s/records) and the sink serialising and writing them.
        self.records = self.sink = 0.0

    def emit(self, ev) -> None:
        if ev["type"] == "step" and ev["step"] > 0:
            m = ev["metrics"]
            self.gen += m["timing_s/gen"]
            self.update += m["timing_s/update"]
            self.step += m["timing_s/step"]
            self.records += m.get("timing_s/records", 0.0)
            self.gen_tokens += m["completions/mean_length"] * 64
            self.update_tokens += m["perf/tokens_per_s"] * m["timing_s/step"]
        t0 = time.perf_counter()
        self.inner.emit(ev)
        self.sink += time.perf_counter() - t0

    def close(self) -> None:
        self.inner.close()


def one_run(cfg: TrainConfig, reward_fn, capture: bool) -> tuple[float, Timing]:
    tmp = tempfile.mkdtemp()
    sink = Timing(
        JsonlSink(os.path.join(tmp, "events.jsonl")) if capture else NullSink()
    )
    # NullSink is what the loop checks for; a wrapper around it still counts as NullSink.
    target = sink if capture else _Null(sink)
    t0 = time.perf_counter()
    train(cfg, make_env(cfg.env.name, seed=0), reward_fn, target)
    return time.perf_counter() - t0, sink


class _Null(NullSink):
    def __init__(self, timing: Timing) -> None:
        self.timing = timing

    def emit(self, ev) -> None:
        self.timing.emit(ev)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--env", default="search")
    ap.add_argument("--trl", action="store_true")
    args = ap.parse_args()
    from rewards import build_reward_fn, default_reward_config

    reward_fn = build_reward_fn(default_reward_config(args.env), env_name=args.env)
    cfg = _config(args)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    null_t, full_t, gen_tps, upd_tps, direct = [], [], [], [], []
    for _ in range(args.repeats):
        for capture in (False, True):
            # Whole-run wall time: it includes building and emitting every event,
            # which the trainer's own timing_s/step (taken before emission) does not.
            wall, timing = one_run(cfg, reward_fn, capture)
            (full_t if capture else null_t).append(wall)
            gen_tps.append(timing.gen_tokens / timing.gen)
            upd_tps.append(timing.update_tokens / max(timing.step, 1e-9))
            if capture:
                cost = timing.records + timing.sink
                direct.append(100 * cost / (wall - cost))
    n, f = statistics.median(null_t), statistics.median(full_t)
    print(
        f"device={'cuda' if torch.cuda.is_available() else 'cpu'} size={args.size} env={args.env} "
        f"steps={args.steps} batch=64 repeats={args.repeats}"
    )
    print(f"rollout tokens/s (generated)     median {statistics.median(gen_tps):10.0f}")
    print(f"training tokens/s (whole step)   median {statistics.median(upd_tps):10.0f}")
    print(
        f"run wall time NullSink    median {n:.3f}s  runs {[round(x, 3) for x in null_t]}"
    )
    print(
        f"run wall time full events median {f:.3f}s  runs {[round(x, 3) for x in full_t]}"
    )
    print(f"event capture overhead, A/B wall time: {100 * (f - n) / n:+.2f}%")
    # The A/B difference carries the machine's run-to-run noise (several % on a
    # shared VM); timing the capture work inside the full run does not.
    print(
        f"event capture overhead, timed in place: median {statistics.median(direct):.2f}%"
        f"  runs {[round(x, 2) for x in direct]} (goal < 3%)"
    )
    if args.trl:
        from bench.trl_compare import compare

        result = compare(args.size, steps=args.steps, repeats=args.repeats)
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
