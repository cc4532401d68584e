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


def _learning(first_step: int = 100, **series: list[float]) -> list[dict[str, float]]:
    """A window of a run whose success started at 5% (its first five steps)."""
    return [
        {**s, "start/success": 0.05, "start/success/se": 0.01}
        for s in run(first_step, **series)
    ]


CLIMB = [0.2, 0.25, 0.3, 0.3, 0.4, 0.45, 0.5, 0.5]


def test_a_fresh_policy_wobbling_around_one_sub_agent_is_not_a_collapse():
    # The live swarm demo's step 4: "0.56 sub-agents per stage (was 1.08)", two steps a
    # half, from a policy that had never fanned out.
    assert serial_collapse(_late([1.1, 1.06, 0.6, 0.52], first_step=1), CFG) is None
    # A fall from fanning out, told from noise, is judged at any age.
    fell = _late([2.6, 2.4, 2.5, 2.7, 1.0, 0.9, 1.1, 1.0], first_step=1)
    found = serial_collapse(fell, CFG)
    assert found is not None and "(was 2.55" in found.message


def test_episodes_lengthening_while_the_run_learns_its_task_are_not_drift():
    grow = {"length": [8.0] * 4 + [16.0] * 4, "truncated": [0.1] * 4 + [0.5] * 4}
    assert length_drift(_learning(success=CLIMB, **grow), CFG) is None
    # The same growth with success where it started, or falling back, is drift.
    flat = length_drift(_learning(success=[0.05] * 8, **grow), CFG)
    assert flat is not None and "mean length 8.0 -> 16.0" in flat.message
    back = [0.9] * 4 + [0.3] * 4  # learned, then lost more than half of it
    assert length_drift(_learning(success=back, **grow), CFG) is not None
    # A rise of 0.05 inside the noise (0.5 standard errors) is not learning.
    noisy = _learning(success=[0.05, 0.1, 0.0, 0.05, 0.4, 0.0, 0.0, 0.0], **grow)
    assert length_drift(noisy, CFG) is not None
    # Nor a slide within the window, though it kept more than half its gain.
    slide = _learning(success=[0.9, 0.88, 0.9, 0.92, 0.55, 0.5, 0.52, 0.5], **grow)
    assert length_drift(slide, CFG) is not None


def test_entropy_under_the_floor_while_the_task_is_being_solved_is_not_collapse():
    from rewards.detectors_health import entropy_collapse

    sharp = {"entropy": [0.13, 0.12, 0.12, 0.11, 0.09, 0.09, 0.08, 0.08]}
    assert entropy_collapse(_learning(success=CLIMB, **sharp), CFG) is None
    flat = entropy_collapse(_learning(success=[0.05] * 8, **sharp), CFG)
    assert flat is not None and flat.message == (
        "entropy collapse: 0.085 nats/token, under the floor 0.1 (early half 0.120) "
        "while success 0.05 -> 0.05"
    )
    # A fall to a quarter within the window is a collapse, learning or not.
    fast = {"entropy": [0.8, 0.8, 0.7, 0.7, 0.15, 0.12, 0.1, 0.1]}
    found = entropy_collapse(_learning(success=CLIMB, **fast), CFG)
    assert found is not None and "0.750 -> 0.117" in found.message


def test_a_state_that_keeps_coming_back_alerts_less_and_less_often():
    # Window 10: the first return after 15 steps absent fires (one window, as
    # before); once it fired twice, 15 absent steps are not enough (two windows);
    # 25 are.
    monitor = _monitor(window=10)
    values = [0.05] * 10 + [2.0] * 15 + [0.05] * 10 + [2.0] * 15 + [0.05] * 10
    values += [2.0] * 25 + [0.05] * 10
    fired = []
    for step, e in enumerate(values, start=1):
        fired += [a.step for a in monitor.observe({"step": step, "entropy": e})]
    assert fired == [4, 29, 89]
