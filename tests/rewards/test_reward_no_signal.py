"""No learning signal is a warning (issue 22, item 9): the ``no_signal`` detector fires
when nearly every group's rewards are all equal for a window of steps, and not on a
healthy run."""

from __future__ import annotations

from rewards.config import DetectorConfig
from rewards.detectors import no_signal
from rewards.monitor import RewardMonitor


def _alerts(fracs: list[float], cfg: DetectorConfig | None = None) -> list:
    """The monitor as the trainer calls it: each step's metrics, by their names."""
    monitor = RewardMonitor(cfg or DetectorConfig(), "calc")
    out = []
    for step, frac in enumerate(fracs, start=1):
        metrics = {"reward": 0.5, "frac_reward_zero_std": frac, "entropy": 1.0}
        out += [a for a in monitor(step, metrics, [], []) if a.detector == "no_signal"]
    return out


def test_it_fires_once_when_every_group_has_identical_rewards_for_a_window():
    alerts = _alerts([1.0] * 60)
    assert [a.step for a in alerts] == [20]  # the default window: 20 steps
    assert alerts[0].severity == "warning"
    assert alerts[0].message.startswith(
        "no learning signal: 100% of groups had identical rewards over the last 20"
    )
    assert alerts[0].evidence["frac_zero_std"] == 1.0


def test_it_waits_for_the_whole_window():
    assert _alerts([1.0] * 19) == []


def test_one_step_with_signal_in_the_window_is_not_no_signal():
    assert _alerts(([1.0] * 9 + [0.5]) * 6) == []


def test_a_healthy_run_with_many_flat_groups_early_is_not_flagged():
    # A fresh policy often fails every rollout of most groups, then learns.
    fracs = [1.0] * 12 + [0.875, 1.0, 0.75, 0.875, 0.625] * 10
    assert _alerts(fracs) == []


def test_the_window_and_the_share_are_settings():
    cfg = DetectorConfig(
        window=8, thresholds={"no_signal.steps": 5, "no_signal.min_frac": 0.5}
    )
    assert [a.step for a in _alerts([0.6] * 8, cfg)] == [5]
    found = no_signal([{"step": float(i), "zero_std": 0.4} for i in range(8)], cfg)
    assert found is None
