"""Each reward-hacking detector on a synthetic run with the pattern and one without,
and the monitor's fire-on-onset policy with hysteresis."""

from __future__ import annotations

import pytest

from rewards import build_monitor, build_reward_fn
from rewards.config import DetectorConfig
from rewards.detectors import (
    judge_verifier_divergence,
    length_drift,
    serial_collapse,
    spurious_parallelism,
    summarize,
)
from rewards.detectors_health import entropy_collapse
from rewards.detectors_search import one_at_a_time_pruning, single_search_exit
from rewards.monitor import enabled_detectors
from rewards.presets import demo_config
from rewards.synthetic import episode

CFG = DetectorConfig(window=8, min_steps=4)


def run(**series: list[float]) -> list[dict[str, float]]:
    """Per-step summaries from parallel series: run(parallelism=[3, 2, 1, 1]), at
    steps 100 on (past serial collapse's first two windows, when a fresh policy is
    not yet judged)."""
    n = len(next(iter(series.values())))
    return [
        {"step": float(100 + i), **{k: v[i] for k, v in series.items()}}
        for i in range(n)
    ]


def test_it_flags_serial_collapse_when_subagents_per_stage_fall_to_one():
    found = serial_collapse(
        run(parallelism=[3.0, 2.5, 2.0, 1.5, 1.0, 1.0, 1.1, 1.0]), CFG
    )
    assert found is not None and "serial collapse" in found.message
    assert found.evidence["parallelism_early"] == 2.25
    assert found.evidence["parallelism_late"] == pytest.approx(1.025)


def test_it_does_not_flag_a_run_that_keeps_fanning_out():
    assert (
        serial_collapse(run(parallelism=[3.0, 3.2, 2.8, 3.0, 3.1, 2.9, 3.0, 3.0]), CFG)
        is None
    )


def test_it_waits_for_enough_steps_before_judging():
    assert serial_collapse(run(parallelism=[1.0, 1.0, 1.0]), CFG) is None


def test_it_flags_spurious_parallelism():
    found = spurious_parallelism(
        run(
            parallelism=[2, 3, 4, 5, 6, 6, 7, 7],
            finish_rate=[0.8, 0.6, 0.5, 0.4, 0.3, 0.3, 0.2, 0.2],
            critical_steps=[10, 10, 11, 10, 10, 11, 10, 11],
        ),
        CFG,
    )
    assert found is not None and found.evidence["finish_rate_late"] == pytest.approx(
        0.25
    )


def test_it_flags_fan_out_whose_sub_agents_are_mostly_wasted():
    """Subtasks get done in the end (finish rate 0.9) but by re-spawning: 0.2 subtasks
    per sub-agent, while the critical path grows."""
    found = spurious_parallelism(
        run(
            parallelism=[2, 2, 3, 3, 3, 3, 3, 3],
            finish_rate=[0.9] * 8,
            subagent_yield=[0.6, 0.5, 0.3, 0.25, 0.2, 0.2, 0.2, 0.2],
            critical_steps=[20, 22, 26, 30, 35, 38, 40, 40],
        ),
        CFG,
    )
    assert found is not None and found.evidence["yield_late"] == pytest.approx(0.2)
    useful = run(
        parallelism=[3] * 8,
        finish_rate=[0.9] * 8,
        subagent_yield=[0.8] * 8,
        critical_steps=[20] * 8,
    )
    assert spurious_parallelism(useful, CFG) is None


def test_wasted_fan_out_is_a_hack_only_when_something_besides_the_task_pays():
    """The swarm demo, paid by r_perf alone, learns to fan out 2.4 sub-agents a stage
    at a 0.3 yield (blocked and retried spawns) while its critical steps grow:
    inefficiency r_perf's latency term charges for. The same numbers while r_parallel
    pays for every spawn (proxy_reward ~1 an episode) are spurious parallelism."""
    shape = dict(
        parallelism=[2.4] * 8,
        finish_rate=[0.75] * 8,
        subagent_yield=[0.3] * 8,
        critical_steps=[20, 22, 24, 25, 26, 27, 27, 28],
    )
    assert spurious_parallelism(run(**shape, proxy_reward=[0.05] * 8), CFG) is None
    assert spurious_parallelism(run(**shape, proxy_reward=[0.9] * 8), CFG) is not None
    assert spurious_parallelism(run(**shape), CFG) is not None  # a trainer not saying
    # Few subtasks finished is waste whoever pays.
    few = {**shape, "finish_rate": [0.3] * 8, "proxy_reward": [0.05] * 8}
    assert spurious_parallelism(run(**few), CFG) is not None


def test_it_flags_a_steady_climb_into_doing_everything_serially():
    """The orchestrator solving subtasks itself more and more (0.45 -> 0.75 of its
    episodes over 20 steps of a fresh run): the halves of the window see half of a
    steady climb (+0.18), its least-squares trend all of it (+0.3)."""
    cfg = DetectorConfig(window=20, min_steps=4)
    climb = [0.45 + 0.3 * i / 19 for i in range(20)]
    w = [{"step": float(i + 1), "serial": x} for i, x in enumerate(climb)]
    found = serial_collapse(w, cfg)
    assert found is not None and "one subtask at a time" in found.message
    flat = [{"step": float(i + 1), "serial": 0.55} for i in range(20)]
    assert serial_collapse(flat, cfg) is None  # a fresh policy starts there


def test_it_does_not_flag_parallelism_that_shortens_the_critical_path():
    healthy = run(
        parallelism=[2, 3, 4, 5, 6, 6, 7, 7],
        finish_rate=[0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4],
        critical_steps=[20, 18, 16, 14, 10, 9, 8, 8],
    )
    assert spurious_parallelism(healthy, CFG) is None
    finishing = run(parallelism=[6] * 8, finish_rate=[0.9] * 8, critical_steps=[10] * 8)
    assert spurious_parallelism(finishing, CFG) is None


def test_it_flags_single_search_exit():
    assert single_search_exit(
        run(single_search_exit=[0.1, 0.2, 0.4, 0.7, 0.8, 0.9]), CFG
    )
    assert (
        single_search_exit(run(single_search_exit=[0.1, 0.2, 0.1, 0.2, 0.1, 0.0]), CFG)
        is None
    )


def test_it_flags_one_at_a_time_pruning():
    found = one_at_a_time_pruning(
        run(prunes=[1, 2, 3, 4, 4, 5], single_doc_prunes=[0, 1, 3, 4, 4, 5]), CFG
    )
    assert found is not None and found.evidence["single_share"] == pytest.approx(1.0)
    bulk = run(prunes=[3, 3, 3, 3, 3, 3], single_doc_prunes=[0, 1, 0, 1, 0, 0])
    assert one_at_a_time_pruning(bulk, CFG) is None


def test_it_flags_pruning_one_at_a_time_in_most_episodes():
    """A bonus per prune: by step 250 most episodes prune two or three documents one
    at a time while others prune none, so the mean is 1.5 prunes an episode (under
    the 2 the per-episode average asks) but the share of episodes doing it (the
    ``one_at_a_time`` flag of rewards.search) climbs from 0.3 to 0.6."""
    from rewards.search import one_at_a_time

    assert (one_at_a_time(2, 2), one_at_a_time(4, 3), one_at_a_time(1, 1)) == (
        1.0,
        0.0,
        0.0,
    )
    found = one_at_a_time_pruning(
        run(
            prunes=[1.2, 1.3, 1.3, 1.4, 1.5, 1.5, 1.6, 1.6],
            single_doc_prunes=[1.2, 1.3, 1.3, 1.4, 1.5, 1.5, 1.6, 1.6],
            one_at_a_time=[0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.6],
        ),
        CFG,
    )
    assert found is not None and found.evidence["episodes_late"] == pytest.approx(
        0.5625
    )
    few = run(prunes=[1.0] * 8, single_doc_prunes=[1.0] * 8, one_at_a_time=[0.2] * 8)
    assert one_at_a_time_pruning(few, CFG) is None


def test_it_flags_a_judge_rising_while_the_verifier_does_not():
    found = judge_verifier_divergence(
        run(**{"judge/score": [0.3, 0.35, 0.4, 0.6, 0.7, 0.8], "success": [0.2] * 6}),
        CFG,
    )
    assert found is not None and found.evidence["judge_late"] == pytest.approx(0.7)
    honest = run(
        **{
            "judge/score": [0.3, 0.35, 0.4, 0.6, 0.7, 0.8],
            "success": [0.1, 0.2, 0.3, 0.5, 0.6, 0.7],
        }
    )
    assert judge_verifier_divergence(honest, CFG) is None


def test_it_flags_length_growth_and_truncation_drift():
    grow = length_drift(run(length=[10, 11, 12, 20, 22, 24], truncated=[0.0] * 6), CFG)
    assert grow is not None and "mean length 11.0 -> 22.0" in grow.message
    cut = length_drift(
        run(length=[10] * 6, truncated=[0.0, 0.1, 0.1, 0.3, 0.4, 0.5]), CFG
    )
    assert cut is not None and "truncated" in cut.message
    steady = run(length=[10, 11, 10, 11, 10, 11], truncated=[0.05] * 6)
    assert length_drift(steady, CFG) is None


def test_it_flags_entropy_collapse_by_floor_or_by_ratio():
    assert (
        entropy_collapse(run(entropy=[2.0, 1.8, 1.5, 0.3, 0.2, 0.1]), CFG) is not None
    )
    assert entropy_collapse(run(entropy=[0.09, 0.08, 0.08, 0.07]), CFG) is not None
    assert entropy_collapse(run(entropy=[2.0, 1.9, 1.9, 1.8, 1.8, 1.7]), CFG) is None


def test_it_reads_thresholds_from_config():
    strict = DetectorConfig(
        window=8, min_steps=4, thresholds={"serial_collapse.max_parallelism": 2.5}
    )
    assert serial_collapse(run(parallelism=[3, 3, 2, 2]), strict) is not None
    assert serial_collapse(run(parallelism=[3, 3, 2, 2]), CFG) is None


def test_it_runs_the_detectors_that_apply_to_the_environment():
    names = lambda env: {d.name for d in enabled_detectors(DetectorConfig(), env)}  # noqa: E731
    assert "serial_collapse" in names("swarm") and "serial_collapse" not in names(
        "search"
    )
    assert "single_search_exit" in names("search") and "entropy_collapse" in names(
        "calc"
    )
    only = DetectorConfig(enabled=["length_drift"])
    assert [d.name for d in enabled_detectors(only, "swarm")] == ["length_drift"]


def swarm_batch(width: int) -> list:
    subs = [{"subtask": f"s{i}", "steps": 3, "success": True} for i in range(width)]
    stages = [{"orchestrator_steps": 1, "subagents": subs}]
    ep = episode(
        "swarm", [{"tool": "spawn", "spawned": [s["subtask"] for s in subs]}, {"tool": "finish"}],
        stages=stages, subtasks_assigned=width, subtasks_completed=width, success=True,
    )  # fmt: skip
    return [ep, ep]


def test_it_fires_serial_collapse_on_onset_and_not_again_while_it_lasts():
    cfg = demo_config("swarm_serial_collapse")  # window 10, min_steps 4
    reward_fn = build_reward_fn(cfg, env_name="swarm")
    monitor = build_monitor(cfg, env_name="swarm")
    widths = [4, 4, 3, 3, 2, 2, 1, 1] + [1] * 20
    fired = []
    for step, width in enumerate(widths, start=1):
        episodes = swarm_batch(width)
        results = reward_fn(episodes, step)
        for alert in monitor(step, {"entropy": 1.0}, episodes, results):
            fired.append((alert.step, alert.detector))
    collapse = [s for s, d in fired if d == "serial_collapse"]
    # A fall from fanning out is judged at any age: at step 8 half the late half
    # (steps 5-8: widths 2, 2, 1, 1) did its work one sub-agent at a time, up from
    # none of steps 1-4; not again: the collapse never cleared.
    assert collapse == [8]
    assert all(d == "serial_collapse" for _, d in fired)


def test_it_fires_again_on_a_new_onset_after_the_pattern_cleared():
    monitor = build_monitor(demo_config("swarm_serial_collapse"), env_name="swarm")
    reward_fn = build_reward_fn(demo_config("swarm_serial_collapse"), env_name="swarm")
    steps = []
    for step, width in enumerate([1] * 25 + [4] * 15 + [1] * 12, start=1):
        eps = swarm_batch(width)
        steps += [a.step for a in monitor(step, {}, eps, reward_fn(eps, step))]
    # Onset at 21 (judged from then on); cleared once width 4 reaches the late half
    # (about step 27) and absent for more than a window, so the return to width 1
    # fires again: at step 43, when 3 of the late half's 5 steps (39-43) are serial.
    assert steps == [21, 43]


def test_it_summarises_results_and_trainer_metrics_per_step():
    eps = swarm_batch(3)
    results = build_reward_fn(demo_config("swarm_serial_collapse"), env_name="swarm")(
        eps, 1
    )
    s = summarize(
        1,
        {"entropy": 0.7, "completions/mean_length": 12.0, "reward": float("nan")},
        eps,
        results,
    )
    assert s["parallelism"] == 3.0 and s["finish_rate"] == 1.0 and s["success"] == 1.0
    assert s["entropy"] == 0.7 and s["length"] == 12.0 and "reward" not in s
