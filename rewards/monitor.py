"""The monitor: keeps a window of step summaries and runs the enabled detectors.

Called once per training step after the update. A detector's alert fires at onset and
not again while the pattern persists; it re-arms only after the pattern has been
absent for ``window`` consecutive steps (hysteresis: a finding that flickers at its
threshold, or a state that lasts the whole run, is one alert, not one per window),
and, once it has fired n times, for n windows (at most :data:`MAX_REARM_WINDOWS`): a
state that keeps coming back (a converged policy whose groups are alike most steps,
``no_learning_signal`` at steps 548, 603, 641 and 674 of the live swarm demo) says so
a few times, not every other window for the rest of the run. A resumed run's monitor
starts afresh (its window, its counts), as it always has.
Given where the step's rollouts are stored, an alert names those of its step that show
the pattern (``rewards.evidence``), which the recording policy then keeps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from rewards.config import DetectorConfig, RewardConfig
from rewards.detectors import (
    DETECTORS,
    DetectorSpec,
    Summary,
    summarize,
)
from rewards.evidence import pick
from rewards.start_levels import note_start, with_start
from rewards.types import (
    Alert,
    Episode,
    Monitor,
    RewardResult,
    TrajectoryInfo,
    TrajectoryRef,
)

MAX_REARM_WINDOWS = 4


def rearm_steps(window: int, fired: int) -> int:
    """Steps a pattern must be absent before a detector that fired ``fired`` times
    fires again: a window, then one more for each alert, up to
    :data:`MAX_REARM_WINDOWS` windows (the server's detection uses the same).

    >>> [rearm_steps(20, n) for n in (0, 1, 2, 3, 9)]
    [20, 20, 40, 60, 80]
    """
    return window * min(max(fired, 1), MAX_REARM_WINDOWS)


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
        # The run's first values of the keys detectors compare with its start.
        self.first: dict[str, list[float]] = {}
        # detector -> last step its pattern was seen, while it is not re-armed
        self._active: dict[str, int] = {}
        self._fired: dict[str, int] = {}  # detector -> alerts it raised

    def state_dict(self) -> dict[str, Any]:
        """What the detectors remember, as JSON (a checkpoint's ``meta.json``): the
        window, the run's first values, what fired and when it was last seen."""
        return {
            "window": [dict(s) for s in self.window],
            "first": {k: list(v) for k, v in self.first.items()},
            "active": dict(self._active),
            "fired": dict(self._fired),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where :meth:`state_dict` left off: a run resumed after a pause
        (or a lost worker) neither raises again what it already raised nor takes
        the step it resumed at for its start."""
        self.window.clear()
        self.window.extend(dict(s) for s in state.get("window") or ())
        self.first = {k: list(v) for k, v in (state.get("first") or {}).items()}
        self._active = {str(k): int(v) for k, v in (state.get("active") or {}).items()}
        self._fired = {str(k): int(v) for k, v in (state.get("fired") or {}).items()}

    def __call__(
        self,
        step: int,
        metrics: Mapping[str, float],
        episodes: Sequence[Episode],
        results: Sequence[RewardResult],
        trajectories: Sequence[TrajectoryInfo] | None = None,
    ) -> list[Alert]:
        summary = summarize(step, metrics, episodes, results)
        if trajectories is None:
            return self.observe(summary)
        rows = [
            {**r.metrics, **t.stats} for r, t in zip(results, trajectories, strict=True)
        ]
        return self.observe(summary, rows, trajectories)

    def observe(
        self,
        summary: Summary,
        rows: Sequence[Mapping[str, Any]] = (),
        trajectories: Sequence[TrajectoryInfo] = (),
    ) -> list[Alert]:
        """Alerts for one more step's summary (also: replaying a recorded run).
        ``rows``: the step's per-trajectory numbers, ``trajectories`` where each is
        stored; a firing alert names those that show its pattern."""
        note_start(self.first, summary)
        summary = with_start(summary, self.first)
        self.window.append(summary)
        step = int(summary["step"])
        window = list(self.window)
        alerts = []
        for spec in self.detectors:
            finding = spec.fn(window, self.cfg)
            if finding is None:
                rearm = rearm_steps(self.cfg.window, self._fired.get(spec.name, 0))
                if step - self._active.get(spec.name, step) >= rearm:
                    del self._active[spec.name]  # absent long enough: re-armed
                continue
            fired = spec.name in self._active
            self._active[spec.name] = step  # last step the pattern was seen
            if fired:
                continue
            self._fired[spec.name] = self._fired.get(spec.name, 0) + 1
            evidence = {
                "window": [int(window[0]["step"]), int(window[-1]["step"])],
                **finding.evidence,
            }
            picked, matched = pick(spec.name, rows, evidence, self.cfg)
            refs = tuple(
                TrajectoryRef(
                    trajectories[i].group,
                    trajectories[i].index,
                    trajectories[i].task_id,
                    why,
                )
                for i, why in picked
            )
            if rows:
                evidence["trajectories_matched"] = matched
            alerts.append(
                Alert(spec.name, spec.severity, finding.message, step, evidence, refs)
            )
        return alerts


def build_monitor(cfg: RewardConfig, *, env_name: str) -> Monitor:
    """A fresh stateful monitor for one run (see the module docstring)."""
    return RewardMonitor(cfg.detectors, env_name)
