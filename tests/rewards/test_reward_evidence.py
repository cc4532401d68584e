"""Alerts name the trajectories that made them fire (``rewards.evidence``): on a
crafted step, exactly the rollouts that show the pattern, no others."""

from __future__ import annotations

from rewards.config import DetectorConfig
from rewards.detectors import DETECTORS
from rewards.evidence import MAX_TRAJECTORIES, PREDICATES, pick
from rewards.monitor import RewardMonitor
from rewards.types import RewardBreakdown, RewardResult, TrajectoryInfo


def _result(**metrics: float) -> RewardResult:
    return RewardResult(RewardBreakdown(0.0, {}, {}), metrics=metrics)


def _info(n: int, group_size: int = 2, **stats: list[float]) -> list[TrajectoryInfo]:
    return [
        TrajectoryInfo(
            i // group_size,
            i % group_size,
            f"task-{i // group_size}",
            {k: v[i] for k, v in stats.items()},
        )
        for i in range(n)
    ]


def test_every_built_in_detector_can_name_its_trajectories():
    assert set(DETECTORS) <= set(PREDICATES)


def test_serial_collapse_names_exactly_the_rollouts_that_ran_one_sub_agent_a_stage():
    cfg = DetectorConfig(enabled=["serial_collapse"], window=8, min_steps=4)
    mon = RewardMonitor(cfg, "swarm")
    for step in range(100, 107):  # past the warm-up, just above the threshold
        assert mon.observe({"step": float(step), "parallelism": 1.25}) == []
    # The crafted step: 6 rollouts, 3 groups of 2; parallelism per rollout (mean 1).
    par = [1.0, 1.9, 1.1, 1.0, 0.0, 1.0]
    results = [_result(parallelism=p) for p in par]
    alerts = mon(107, {"parallelism/mean": 1.0}, [None] * 6, results, _info(6))
    assert [a.detector for a in alerts] == ["serial_collapse"]
    refs = alerts[0].trajectories
    # 1.0, 1.1, 1.0 and 1.0 are about one sub-agent a stage; 1.9 fans out, and 0.0
    # spawned nothing at all (not serial work).
    assert [(t.group, t.index) for t in refs] == [(0, 0), (1, 0), (1, 1), (2, 1)]
    assert [t.task_id for t in refs] == ["task-0", "task-1", "task-1", "task-2"]
    assert refs[1].why == "1.10 sub-agents per stage"
    assert alerts[0].evidence["trajectories_matched"] == 4


def test_length_drift_names_the_long_and_the_truncated_rollouts():
    cfg = DetectorConfig(enabled=["length_drift"], window=8, min_steps=4)
    mon = RewardMonitor(cfg, "calc")
    for step in range(101, 108):  # past the fresh policy's first two windows
        assert mon.observe({"step": float(step), "length": 10.0}) == []
    lengths = [10.0, 16.0, 40.0, 14.0]  # early mean 10, growth limit 1.5: >= 15
    results = [_result(truncated=0.0) for _ in lengths]
    alerts = mon(
        108, {"completions/mean_length": 40.0}, [None] * 4, results,
        _info(4, length=lengths),
    )  # fmt: skip
    assert [a.detector for a in alerts] == ["length_drift"]
    assert [(t.group, t.index) for t in alerts[0].trajectories] == [(0, 1), (1, 0)]
    assert alerts[0].trajectories[1].why == "40 tokens (4.0x the early mean)"


def test_judge_vs_verifier_names_failed_rollouts_the_judge_scored_high():
    cfg = DetectorConfig(enabled=["judge_verifier_divergence"], window=8, min_steps=4)
    rows = [
        {"judge/score": 0.9, "success": 0.0},  # talked the judge round
        {"judge/score": 0.9, "success": 1.0},  # earned it
        {"judge/score": 0.2, "success": 0.0},  # the judge agrees it failed
        {"judge/score": 0.8, "success": 0.0},
    ]
    picked, matched = pick("judge_verifier_divergence", rows, {"judge_late": 0.75}, cfg)
    assert [i for i, _ in picked] == [0, 3] and matched == 2


def test_without_where_rollouts_are_stored_an_alert_names_none():
    cfg = DetectorConfig(enabled=["entropy_collapse"], window=4, min_steps=2)
    mon = RewardMonitor(cfg, "calc")
    mon.observe({"step": 1.0, "entropy": 2.0})
    alerts = mon(2, {"entropy": 0.01}, [], [])
    assert alerts and alerts[0].trajectories == ()
    assert "trajectories_matched" not in alerts[0].evidence


def test_an_alert_names_at_most_the_cap_and_counts_the_rest():
    cfg = DetectorConfig()
    rows = [{"single_search_exit": 1.0}] * (MAX_TRAJECTORIES + 5)
    picked, matched = pick("single_search_exit", rows, {}, cfg)
    assert len(picked) == MAX_TRAJECTORIES and matched == MAX_TRAJECTORIES + 5


def test_a_detector_without_a_predicate_names_nothing():
    assert pick("a_plugins_detector", [{"x": 1.0}], {}, DetectorConfig()) == ([], 0)
