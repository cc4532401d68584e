"""Detectors fire on a change that matters (issue 11, item 6): a minimum effect size, a
baseline that existed, and one alert per onset (hysteresis), not one per window."""

from __future__ import annotations

from rewards.config import DetectorConfig
from rewards.detectors import length_drift, serial_collapse
from rewards.detectors_search import single_search_exit
from rewards.monitor import RewardMonitor

CFG = DetectorConfig(window=8, min_steps=4)


def run(first_step: int = 100, **series: list[float]) -> list[dict[str, float]]:
    n = len(next(iter(series.values())))
    return [
        {"step": float(first_step + i), **{k: v[i] for k, v in series.items()}}
        for i in range(n)
    ]


def _late(xs: list[float], first_step: int = 100) -> list[dict[str, float]]:
    """A window of a run that is past its first windows."""
    return [{"step": float(first_step + i), "parallelism": x} for i, x in enumerate(xs)]


def test_a_policy_that_never_spawns_a_sub_agent_has_no_serial_collapse():
    # The "0.00 sub-agents per stage (was 0.00)": nothing runs serially either.
    assert serial_collapse(_late([0.0] * 8), CFG) is None
    assert serial_collapse(_late([0.3] * 8), CFG) is None
    found = serial_collapse(_late([1.0] * 8), CFG)  # one sub-agent at a time: serial
    assert found is not None and "1.00 sub-agents per stage (was 1.00" in found.message


def test_a_fresh_policy_is_not_judged_serial_before_two_windows():
    # Window 8: steps 1-8 and 9-16 are the policy's first two windows.
    assert serial_collapse(_late([1.0] * 8, first_step=9), CFG) is None
    assert serial_collapse(_late([1.0] * 8, first_step=10), CFG) is not None


def test_a_policy_climbing_out_of_serial_is_not_flagged():
    assert serial_collapse(_late([0.8] * 4 + [1.1] * 4), CFG) is None


def test_a_truncated_share_creeping_up_a_point_is_not_drift():
    steady = run(length=[12.0] * 8, truncated=[0.98] * 4 + [0.99] * 4)
    assert length_drift(steady, CFG) is None
    rising = run(length=[12.0] * 8, truncated=[0.2] * 4 + [0.4] * 4)
    found = length_drift(rising, CFG)
    assert found is not None and "truncated 20% -> 40%" in found.message


def test_a_fresh_policy_lengthening_as_it_learns_its_tools_is_not_drift():
    # Window 8: steps 1-16 are the policy's first two windows (issue 25: the search
    # demo's rollouts lengthen 8 -> 16 tokens as it learns to search more).
    grow = {"length": [8.0] * 4 + [16.0] * 4}
    assert length_drift(run(first_step=9, **grow), CFG) is None
    assert length_drift(run(first_step=10, **grow), CFG) is not None


def _monitor(window: int = 10) -> RewardMonitor:
    cfg = DetectorConfig(enabled=["entropy_collapse"], window=window, min_steps=4)
    return RewardMonitor(cfg, "calc")


def test_a_state_that_lasts_the_whole_run_is_one_alert():
    monitor = _monitor()
    fired = []
    for step in range(1, 121):  # entropy under the 0.1 floor for 120 steps
        fired += [a.step for a in monitor.observe({"step": step, "entropy": 0.05})]
    assert fired == [4]


def test_a_pattern_that_flickers_does_not_re_fire_until_absent_a_whole_window():
    monitor = _monitor(window=10)
    fired = []
    # Entropy under the floor, then above it for 6 steps (a flicker), under again,
    # then above for 30 steps, then under: three onsets but only two alerts.
    values = [0.05] * 10 + [2.0] * 6 + [0.05] * 10 + [2.0] * 30 + [0.05] * 10
    for step, e in enumerate(values, start=1):
        fired += [a.step for a in monitor.observe({"step": step, "entropy": e})]
    assert len(fired) == 2 and fired[0] == 4 and fired[1] > 56


def test_a_fresh_search_policy_answering_early_is_not_a_learned_exit():
    early = [{"step": float(s), "single_search_exit": 0.66} for s in range(1, 9)]
    assert single_search_exit(early, CFG) is None  # steps 1-8: the first window
    later = [{"step": float(s), "single_search_exit": 0.66} for s in range(20, 28)]
    assert single_search_exit(later, CFG) is not None
