"""The monitor: keeps a window of step summaries and runs the enabled detectors.

Called once per training step after the update. A detector's alert fires at onset and
not again while the pattern persists; it re-arms only after the pattern has been
absent for ``window`` consecutive steps (hysteresis: a finding that flickers at its
threshold, or a state that lasts the whole run, is one alert, not one per window).
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
        # detector -> last step its pattern was seen, while it is not re-armed
        self._active: dict[str, int] = {}

    def __call__(
        self,
        step: int,
        metrics: Mapping[str, float],
        episodes: Sequence[Episode],
        results: Sequence[RewardResult],
    ) -> list[Alert]:
        return self.observe(summarize(step, metrics, episodes, results))

    def observe(self, summary: Summary) -> list[Alert]:
        """Alerts for one more step's summary (also: replaying a recorded run)."""
        self.window.append(summary)
        step = int(summary["step"])
        window = list(self.window)
        alerts = []
        for spec in self.detectors:
            finding = spec.fn(window, self.cfg)
            if finding is None:
                if step - self._active.get(spec.name, step) >= self.cfg.window:
                    del self._active[spec.name]  # absent a whole window: re-armed
                continue
            fired = spec.name in self._active
            self._active[spec.name] = step  # last step the pattern was seen
            if fired:
                continue
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
