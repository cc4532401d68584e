"""False alarms of the reward-hacking detectors on healthy runs, beside the hacked demos.

    python bench/detector_false_alarms.py record [CONFIG ...] [--minutes 4]
    python bench/detector_false_alarms.py replay

``record`` trains every config of ``bench/configs/`` (or those named) with the trainer,
for its steps or the time budget, and writes what the detectors saw each step (the
monitor's summaries) and the alerts they raised to ``var/bench/detectors/<config>.jsonl``.
``replay`` runs the current detectors over those recordings, with each config's own
detector settings, and prints alerts per 100 steps for each detector: on the healthy
configs every alert is a false alarm; the hacked demos (``swarm_serial_collapse``,
``swarm_spurious_parallelism``) must still raise their own detector.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = ROOT / "bench" / "configs"
OUT = ROOT / "var" / "bench" / "detectors"
HACKED = {
    "swarm_serial_collapse": "serial_collapse",
    "swarm_spurious_parallelism": "spurious_parallelism",
}


class Recorder:
    """A sink that keeps the run's alerts; stops at the time budget (of steps)."""

    def __init__(self, budget_s: float) -> None:
        self.start: float | None = None  # the first step: warm-start not counted
        self.budget_s = budget_s
        self.alerts: list[dict] = []

    def emit(self, ev) -> None:
        if ev["type"] == "step" and self.start is None:
            self.start = time.perf_counter()
        if ev["type"] == "alert":
            self.alerts.append(
                {"step": ev["step"], "detector": ev["detector"], "msg": ev["message"]}
            )

    def should_stop(self) -> bool:
        return (
            self.start is not None and time.perf_counter() - self.start > self.budget_s
        )

    def close(self) -> None:
        pass


def record(names: list[str], minutes: float) -> None:
    import rewards.monitor as monitor
    from trainer.cli import load_config_file
    from trainer.runner import run_from_config

    OUT.mkdir(parents=True, exist_ok=True)
    real = monitor.summarize
    for name in names:
        cfg = load_config_file(str(CONFIGS / f"{name}.yaml"))
        summaries: list[dict] = []

        def summarize(*args, summaries=summaries, **kw):
            s = real(*args, **kw)
            summaries.append(dict(s))
            return s

        monitor.summarize = summarize
        rec = Recorder(minutes * 60)
        t0 = time.perf_counter()
        run_from_config(cfg, rec, should_stop=rec.should_stop)
        with (OUT / f"{name}.jsonl").open("w") as f:
            for s in summaries:
                f.write(json.dumps({"summary": s}) + "\n")
            for a in rec.alerts:
                f.write(json.dumps({"alert": a}) + "\n")
        print(
            f"{name}: {len(summaries)} steps in {time.perf_counter() - t0:.0f}s, "
            f"{len(rec.alerts)} alerts",
            flush=True,
        )
    monitor.summarize = real


def replay_one(path: Path) -> tuple[int, list[dict], list[dict]]:
    """(steps, alerts recorded at training time, alerts of the current detectors)."""
    from rewards.monitor import RewardMonitor
    from trainer.cli import load_config_file

    cfg = load_config_file(str(CONFIGS / f"{path.stem}.yaml"))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    summaries = [r["summary"] for r in rows if "summary" in r]
    recorded = [r["alert"] for r in rows if "alert" in r]
    from trainer.runner import reward_config_for

    mon = RewardMonitor(reward_config_for(cfg).detectors, cfg.env.name)
    now = []
    for s in summaries:
        for a in mon.observe(s):
            now.append({"step": a.step, "detector": a.detector, "msg": a.message})
    return len(summaries), recorded, now


def _rates(alerts: list[dict], steps: int) -> str:
    by: dict[str, int] = {}
    for a in alerts:
        by[a["detector"]] = by.get(a["detector"], 0) + 1
    per = {k: round(100 * v / max(steps, 1), 2) for k, v in sorted(by.items())}
    return f"{len(alerts)} alerts ({per or 'none'} per 100 steps)"


def replay() -> int:
    ok = True
    for path in sorted(OUT.glob("*.jsonl")):
        steps, before, after = replay_one(path)
        kind = (
            f"hacked, expects {HACKED[path.stem]}" if path.stem in HACKED else "healthy"
        )
        print(f"{path.stem} ({kind}), {steps} steps")
        print(f"   at training time: {_rates(before, steps)}")
        print(f"   current detectors: {_rates(after, steps)}")
        for a in after[:12]:
            print(f"      step {a['step']} {a['detector']}: {a['msg']}")
        if path.stem in HACKED:
            caught = [a for a in after if a["detector"] == HACKED[path.stem]]
            print(
                f"   caught: {bool(caught)} (first at step "
                f"{caught[0]['step'] if caught else None})"
            )
            ok &= bool(caught)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["record", "replay"])
    ap.add_argument("configs", nargs="*")
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.command == "replay":
        return replay()
    import torch

    torch.set_num_threads(args.threads)
    names = args.configs or sorted(p.stem for p in CONFIGS.glob("*.yaml"))
    record(names, args.minutes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
