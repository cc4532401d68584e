"""The monitor: keeps a window of step summaries and runs the enabled detectors.

Called once per training step after the update. A detector's alert fires at onset,
then at most once per ``window`` steps while the pattern persists; when the pattern
clears, the next onset fires again. (Re-firing every step would bury the one alert
that matters under copies of itself.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from rewards.config import DetectorConfig, RewardConfig
from rewards.detectors import DETECTORS, DetectorSpec, Summary, summarize
from rewards.types import Alert, Episode, Monitor, RewardResult


def enabled_detectors(cfg: DetectorConfig, env_name: str) -> list[DetectorSpec]:
    """The configured detectors, or (``enabled`` None) every one that applies to the
    environment."""
    if cfg.enabled is not None:
        return [DETECTORS.get(name) for name in cfg.enabled]
    specs = [DETECTORS.get(name) for name in DETECTORS]
    return [s for s in specs if s.envs is None or env_name in s.envs]


class RewardMonitor:
    def __init__(self, cfg: DetectorConfig, env_name: str) -> None:
        self.cfg = cfg
        self.env_name = env_name
        self.detectors = enabled_detectors(cfg, env_name)
        self.window: deque[Summary] = deque(maxlen=cfg.window)
        self._active: dict[str, int] = {}  # detector -> step it last fired

    def __call__(
        self,
        step: int,
        metrics: Mapping[str, float],
        episodes: Sequence[Episode],
        results: Sequence[RewardResult],
    ) -> list[Alert]:
        self.window.append(summarize(step, metrics, episodes, results))
        window = list(self.window)
        alerts = []
        for spec in self.detectors:
            finding = spec.fn(window, self.cfg)
            if finding is None:
                self._active.pop(spec.name, None)
                continue
            last = self._active.get(spec.name)
            if last is not None and step - last < self.cfg.window:
                continue
            self._active[spec.name] = step
            evidence = {
                "window": [int(window[0]["step"]), int(window[-1]["step"])],
                **finding.evidence,
            }
            alerts.append(
                Alert(spec.name, spec.severity, finding.message, step, evidence)
            )
        return alerts


def build_monitor(cfg: RewardConfig, *, env_name: str) -> Monitor:
    """A fresh stateful monitor for one run (see the module docstring)."""
    return RewardMonitor(cfg.detectors, env_name)
