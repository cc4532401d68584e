"""Train one run of the reward-hacking suite and record what its detectors saw.

A recording (``<run>.jsonl.gz``, one JSON object a line) holds, per RL step, the
monitor's summary, the step's metrics (what a trainer would send to the events API)
and one row per rollout: where it is stored (group, index, task), the numbers the
evidence predicates read (``rewards.evidence``) and its actions; then the alerts the
detectors raised while it trained. ``bench/hacking_measure.py`` replays it through the
current detectors, so tuning a detector needs no retraining.

Warm starts are cached per (environment, model, seed, warm-start settings) under
``var/bench/warm`` (``bench.learning.warm_checkpoint``): a hack and its twin start
from the very same weights.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rewards.detectors import summarize
from rewards.monitor import RewardMonitor
from rewards.types import Alert, Episode, RewardResult, TrajectoryInfo

ROOT = Path(__file__).resolve().parents[1]
WARM = ROOT / "var" / "bench" / "warm"
# Per-rollout numbers not worth keeping (the same for every rollout, or per judge).
_DROP = ("weight/", "lambda_", "judge/rules/", "judge/failures", "judge/all_failed")


def rollout_row(
    result: RewardResult, info: TrajectoryInfo, episode: Episode | None
) -> dict[str, Any]:
    """One rollout as recorded: ``g``, ``i``, ``task``, ``n`` (numbers) and
    ``actions``."""
    numbers = {
        k: float(v)
        for k, v in {**result.metrics, **info.stats}.items()
        if not k.startswith(_DROP) and isinstance(v, int | float)
    }
    steps = episode.steps if episode is not None else ()
    # Every step a well-formed tool call: what a format reward pays in full.
    numbers["format_ok"] = float(bool(steps) and all(s.ok and s.tool for s in steps))
    return {
        "g": info.group,
        "i": info.index,
        "task": info.task_id,
        "n": numbers,
        "actions": [s.action for s in steps],
    }


def alert_record(alert: Alert) -> dict[str, Any]:
    return {
        "step": alert.step,
        "detector": alert.detector,
        "message": alert.message,
        "trajectories": [[t.group, t.index] for t in alert.trajectories],
    }


class RecordingMonitor(RewardMonitor):
    """The run's own monitor, keeping every step it saw (``lines``)."""

    def __init__(self, cfg, env_name: str) -> None:
        super().__init__(cfg, env_name)
        self.lines: list[dict[str, Any]] = []
        self.alerts: list[dict[str, Any]] = []

    def __call__(
        self,
        step: int,
        metrics: Mapping[str, float],
        episodes: Sequence[Episode],
        results: Sequence[RewardResult],
        trajectories: Sequence[TrajectoryInfo] | None = None,
    ) -> list[Alert]:
        alerts = super().__call__(step, metrics, episodes, results, trajectories)
        self.alerts.extend(alert_record(a) for a in alerts)
        self.lines.append(
            {
                "step": step,
                "summary": summarize(step, metrics, episodes, results),
                # Unrounded: the server's summaries must equal the monitor's.
                "metrics": {
                    k: float(v)
                    for k, v in metrics.items()
                    if not k.startswith(("timing_s/", "weight/"))
                    and isinstance(v, int | float)
                },
                "rows": [
                    rollout_row(r, t, e)
                    for r, t, e in zip(
                        results, trajectories or (), episodes, strict=False
                    )
                ],
            }
        )
        return alerts


def write_recording(path: Path, meta: dict, lines: Iterable[dict], alerts) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}) + "\n")
        for line in lines:
            f.write(json.dumps(line) + "\n")
        for a in alerts:
            f.write(json.dumps({"alert": a}) + "\n")
    tmp.replace(path)


def read_recording(path: Path) -> tuple[dict, list[dict], list[dict]]:
    """``(meta, steps, alerts at training time)``."""
    opener = gzip.open if path.suffix == ".gz" else open
    meta, steps, alerts = {}, [], []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            if "meta" in obj:
                meta = obj["meta"]
            elif "alert" in obj:
                alerts.append(obj["alert"])
            else:
                steps.append(obj)
    return meta, steps, alerts


def load_config(data: dict[str, Any]):
    """TrainConfig data validated, with the suite's flawed components loaded (as a
    plugin: ``bench.hacking_rewards``)."""
    from trainer.config import TrainConfig
    from trainer.plugins import load_plugins

    load_plugins(["bench.hacking_rewards"], entry_points=False)
    return TrainConfig.model_validate(data)


def warm(data: dict[str, Any]) -> Path | None:
    """The cached warm-started weights of a run's config (made on first use)."""
    from bench.learning import warm_checkpoint

    if "dataset" in json.dumps(data.get("env", {})):
        _ensure_arith()
    cfg = load_config(data)
    if not cfg.model.warmstart_steps:
        return None
    return warm_checkpoint(cfg, WARM)


def record_run(
    name: str, data: dict[str, Any], out: Path, budget_s: float | None = None
) -> dict[str, Any]:
    """Train ``data`` (TrainConfig data) from its cached warm start and write its
    recording to ``out``; returns the recording's meta."""
    from rewards import build_reward_fn
    from trainer.envs.base import make_env
    from trainer.events import NullSink
    from trainer.loop import train
    from trainer.runner import reward_config_for

    init = warm(data)
    cfg = load_config(data)
    env = make_env(cfg.env.name, cfg.env.params, seed=cfg.seed)
    rcfg = reward_config_for(cfg)
    reward_fn = build_reward_fn(rcfg, env_name=cfg.env.name)
    monitor = RecordingMonitor(rcfg.detectors, cfg.env.name)
    t0 = time.perf_counter()

    def stop() -> bool:
        return budget_s is not None and time.perf_counter() - t0 > budget_s

    train(cfg, env, reward_fn, NullSink(), monitor=monitor, should_stop=stop,
          init_checkpoint=init)  # fmt: skip
    meta = {
        "run": name,
        "config": cfg.model_dump(mode="json"),
        "detectors": rcfg.detectors.model_dump(mode="json"),
        "env": cfg.env.name,
        "steps": len(monitor.lines),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_recording(out, meta, monitor.lines, monitor.alerts)
    return meta


def _ensure_arith() -> None:
    path = ROOT / "var" / "data" / "arith.jsonl"
    if not path.exists():
        from bench.make_arith_dataset import main as make_arith

        make_arith(["--out", str(path)])
