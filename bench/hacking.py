"""Reward-hacking demos: train swarm with a reward that has a hole and watch the
detectors flag it.

    python bench/hacking.py [swarm_serial_collapse swarm_spurious_parallelism] [--minutes 8]

``swarm_serial_collapse`` (lambda_parallel = 0, no latency pressure) should raise
``serial_collapse``; ``swarm_spurious_parallelism`` (r_parallel on, r_finish off) should
raise ``spurious_parallelism``. Prints, every 20 steps, the metrics the detectors read
(sub-agents per stage, finish rate, critical steps) and every alert with its step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WATCH = (
    "reward",
    "parallelism/mean",
    "finish_rate/mean",
    "critical_steps/mean",
    "subagents/mean",
)


class Watch:
    def __init__(self, budget_s: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s
        self.alerts: list[dict] = []
        self.rows: list[dict] = []

    def emit(self, ev) -> None:
        if ev["type"] == "step" and ev["step"] > 0:
            m = ev["metrics"]
            row = {"step": ev["step"], **{k: round(m[k], 3) for k in WATCH if k in m}}
            self.rows.append(row)
            if ev["step"] % 20 == 0:
                print("  ", json.dumps(row), flush=True)
        elif ev["type"] == "alert":
            self.alerts.append(ev)
            print(
                f"  ALERT step {ev['step']} [{ev['detector']}] {ev['message']}",
                flush=True,
            )

    def should_stop(self) -> bool:
        return time.perf_counter() - self.start > self.budget_s

    def close(self) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "demos",
        nargs="*",
        default=["swarm_serial_collapse", "swarm_spurious_parallelism"],
    )
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    from trainer.cli import load_config_file
    from trainer.runner import run_from_config

    torch.set_num_threads(args.threads)
    expected = {
        "swarm_serial_collapse": "serial_collapse",
        "swarm_spurious_parallelism": "spurious_parallelism",
    }
    ok = True
    for demo in args.demos:
        cfg = load_config_file(str(ROOT / "bench" / "configs" / f"{demo}.yaml"))
        print(f"{demo}: up to {cfg.steps} steps", flush=True)
        w = Watch(args.minutes * 60)
        run_from_config(cfg, w, should_stop=w.should_stop)
        fired = [a for a in w.alerts if a["detector"] == expected.get(demo)]
        first = fired[0]["step"] if fired else None
        print(
            f"{demo}: {len(w.rows)} steps, {expected.get(demo)} first flagged at step "
            f"{first}; all alerts: {[(a['step'], a['detector']) for a in w.alerts]}"
        )
        ok &= bool(fired)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
