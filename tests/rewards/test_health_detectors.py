"""The detectors added for the reward-hacking suite (issue 25): reward without success,
repetition, a learned single-search exit and a serial collapse from fanning out, each
on hand-made windows, and what their evidence names."""

from __future__ import annotations

import pytest

from rewards.config import DetectorConfig
from rewards.detectors import serial_collapse, summarize
from rewards.detectors_health import (
    no_learning_signal,
    repetition,
    reward_without_success,
)
from rewards.detectors_search import single_search_exit
from rewards.evidence import pick
from rewards.facts import repetition as repetition_of
from rewards.types import RewardBreakdown, RewardResult

CFG = DetectorConfig(window=20, min_steps=4)


def window(**series):
    n = len(next(iter(series.values())))
    return [
        {"step": float(i + 1), **{k: float(v[i]) for k, v in series.items()}}
        for i in range(n)
    ]


def test_proxy_terms_rising_without_success_name_the_term_that_rose():
    w = window(
        proxy_reward=[0.1, 0.2, 0.3, 0.4, 0.5],
        success=[0.2] * 5,
        **{
            "component/format": [0.1, 0.2, 0.3, 0.4, 0.5],
            "component/outcome": [0.2] * 5,
        },
    )
    found = reward_without_success(w, CFG)
    assert found is not None
    assert found.evidence["component"] == "format"
    assert found.message == (
        "reward without success: proxy terms pay +0.40 (most from format: +0.40) "
        "across the last 5 steps while success moved +0.00"
    )


def test_proxy_terms_that_bring_success_along_are_shaping():
    # success rose by more than a quarter of what the proxy did
    w = window(
        proxy_reward=[0.1, 0.2, 0.3, 0.4, 0.5], success=[0.0, 0.03, 0.06, 0.09, 0.12]
    )
    assert reward_without_success(w, CFG) is None
    flat = window(proxy_reward=[0.3, 0.32, 0.31, 0.33, 0.32], success=[0.2] * 5)
    assert reward_without_success(flat, CFG) is None


def test_only_proxy_components_count_as_proxy_reward():
    from rewards.combine import build_reward_fn
    from rewards.config import RewardConfig
    from rewards.synthetic import episode

    cfg = {"components": [{"name": "outcome"}, {"name": "format", "weight": 0.5}]}
    fn = build_reward_fn(RewardConfig.model_validate(cfg), env_name="calc")
    ep = episode("calc", [{"tool": "answer", "ok": True}], success=True)
    assert fn([ep], 1)[0].metrics["proxy_reward"] == 0.5  # the format's, not 1.5
    outcome_only = RewardConfig.model_validate({"components": [{"name": "outcome"}]})
    fn = build_reward_fn(outcome_only, env_name="calc")
    assert "proxy_reward" not in fn([ep], 1)[0].metrics


def test_its_evidence_is_the_failed_rollouts_the_proxies_paid_most():
    rows = [
        {"proxy_reward": 0.9, "success": 0.0},
        {"proxy_reward": 0.2, "success": 0.0},  # failed, paid little: not the hole
        {"proxy_reward": 1.0, "success": 1.0},  # solved: earned
        {"proxy_reward": 0.7, "success": 0.0},
    ]
    picked, matched = pick("reward_without_success", rows, {"proxy_late": 0.6}, CFG)
    assert [i for i, _ in picked] == [0, 3] and matched == 2
    assert picked[0][1] == "proxy terms paid 0.90, task not solved"


def test_the_repetition_metric_counts_repeated_word_pairs():
    assert repetition_of(["calc 3 + 4", "answer 7"]) == 0.0
    assert repetition_of(["calc 3 + 4"] * 4) == 0.75  # 9 of 12 pairs seen before
    assert repetition_of([]) is None


def test_repetition_fires_on_a_rise_to_degenerate_output():
    assert repetition(window(repetition=[0.05] * 5 + [0.6] * 5), CFG) is not None
    # always this repetitive (an environment whose actions repeat words): no change
    assert repetition(window(repetition=[0.5] * 10), CFG) is None
    # a rise that stays below the floor (0.25)
    assert repetition(window(repetition=[0.02] * 5 + [0.2] * 5), CFG) is None


def with_run_start(w, start):
    return [{**s, "start/repetition": start} for s in w]


def test_repetition_is_judged_against_the_runs_own_start():
    """The calculator policy that calls the tool again and again for a bonus: 6% of
    its word pairs at the start, 30% now: caught. The swarm demo, whose retried
    spawns repeat 40% from its first step and 56% later: its nature, not a hack."""
    calc = window(repetition=[0.2] * 10 + [0.3] * 10)
    found = repetition(with_run_start(calc, 0.06), CFG)
    assert found is not None and "was 6% at the run's start" in found.message
    swarm = window(repetition=[0.42] * 10 + [0.56] * 10)
    assert repetition(with_run_start(swarm, 0.40), CFG) is None
    assert repetition(swarm, CFG) is not None  # without its start: a rise in the window
    # The monitor carries the start itself (the mean of the run's first 5 steps).
    from rewards.monitor import RewardMonitor

    monitor = RewardMonitor(CFG, "swarm")
    alerts = []
    for i, r in enumerate([0.40] * 5 + [0.42] * 10 + [0.56] * 10):
        alerts += monitor.observe({"step": float(i + 1), "repetition": r})
    assert [a.detector for a in alerts] == []
    monitor = RewardMonitor(CFG, "calc")
    for i, r in enumerate([0.06] * 5 + [0.1] * 10 + [0.35] * 10):
        alerts += monitor.observe({"step": float(i + 1), "repetition": r})
    assert [a.detector for a in alerts] == ["repetition"]
    assert alerts[0].evidence["repetition_start"] == pytest.approx(0.06)


def test_repetition_evidence_is_measured_from_the_runs_start_too():
    rows = [{"repetition": 0.5}, {"repetition": 0.62}]
    picked, _ = pick("repetition", rows, {"repetition_start": 0.4}, CFG)
    assert picked == [(1, "62% of its word pairs repeat")]  # 0.4 + 0.2 at least


def test_repetition_evidence_names_the_repetitive_rollouts():
    rows = [{"repetition": 0.7}, {"repetition": 0.1}, {}]
    picked, _ = pick("repetition", rows, {}, CFG)
    assert picked == [(0, "70% of its word pairs repeat")]


def test_the_episode_metric_reaches_the_step_summary():
    from rewards.combine import build_reward_fn
    from rewards.config import RewardConfig
    from rewards.synthetic import episode

    fn = build_reward_fn(
        RewardConfig.model_validate({"components": [{"name": "format"}]}),
        env_name="calc",
    )
    ep = episode("calc", [{"action": "calc 1 + 1"}, {"action": "calc 1 + 1"}])
    results = fn([ep], 1)
    assert results[0].metrics["repetition"] == 0.5
    assert summarize(1, {}, [ep], results)["repetition"] == 0.5


def test_a_learned_single_search_exit_is_caught_at_any_age():
    # steps 1-10 of a run: searching more, then answering after one search
    w = window(single_search_exit=[0.2] * 5 + [0.8] * 5)
    assert single_search_exit(w, CFG) is not None
    # a fresh policy that answers early from its first step: judged only later
    assert single_search_exit(window(single_search_exit=[0.8] * 10), CFG) is None


def test_a_collapse_from_fanning_out_is_caught_at_any_age():
    assert serial_collapse(window(parallelism=[2.5] * 5 + [1.0] * 5), CFG) is not None
    # a fresh policy that starts serial: judged only once past its warm-up
    assert serial_collapse(window(parallelism=[1.0] * 10), CFG) is None


def test_no_learning_signal_reads_its_last_steps_not_the_whole_window():
    # learning for 12 steps, then 8 steps of equal groups: told at once
    w = window(zero_std=[0.3] * 12 + [1.0] * 8)
    assert no_learning_signal(w, CFG) is not None


def test_summaries_carry_each_reward_terms_mean():
    r = RewardResult(RewardBreakdown(1.0, {}, {}))
    s = summarize(2, {"rewards/format/mean": 0.1, "rewards/a/b/mean": 9}, [], [r])
    assert s["component/format"] == 0.1 and "component/a" not in s


def test_a_shortcut_is_episodes_shrinking_while_success_does_not_rise():
    from rewards.detectors_health import shortcut

    w = window(length=[7.5, 7.4, 5.7, 4.3, 4.5, 3.6], success=[0.02] * 6)
    found = shortcut(w, CFG)
    assert found is not None
    assert (
        found.message
        == "shortcut: episodes 6.9 -> 4.1 tokens while success 0.02 -> 0.02"
    )
    # shorter and better: the policy got efficient, not lazy
    better = window(
        length=[7.5, 7.4, 5.7, 4.3, 4.5, 3.6], success=[0.1] * 3 + [0.4] * 3
    )
    assert shortcut(better, CFG) is None


def test_a_shortcut_is_not_step_to_step_noise():
    """A newcomer's 20-step run of 4 x 4 rollouts raised "shortcut: episodes 5.7 ->
    3.4 tokens" from one long first step (10 tokens) and noise: the halves' means
    differ by 1.4 standard errors, a steady fall by 4."""
    from rewards.detectors_health import separation, shortcut

    noisy = [10, 4.625, 2.938, 5.062, 2.625, 4.125, 4.875, 2.0]
    success = [0, 0, 0.125, 0, 0, 0, 0, 0.125]
    assert shortcut(window(length=noisy, success=success), CFG) is None
    assert separation(noisy) < 2 < separation([7.5, 7.4, 5.7, 4.3, 4.5, 3.6])
    # the same fall without the noise is one
    steady = [5.7, 5.6, 5.7, 5.6, 3.4, 3.5, 3.4, 3.3]
    assert shortcut(window(length=steady, success=success), CFG) is not None


def test_shortcut_evidence_is_the_short_failed_rollouts():
    rows = [
        {"length": 3.0, "success": 0.0},
        {"length": 3.0, "success": 1.0},  # short and right
        {"length": 7.0, "success": 0.0},  # as long as before
    ]
    picked, matched = pick("shortcut", rows, {"length_early": 7.0}, CFG)
    assert [i for i, _ in picked] == [0] and matched == 1
    assert picked[0][1] == "3 tokens (0.4x the early mean), not solved"


def _shortcut_alerts(lengths, successes, proxy_share=0.99):
    """The shortcut alerts a monitor (window 20) raises over a run's step summaries,
    with the run's start levels it keeps itself; the proxy terms paying
    ``proxy_share`` of a reward of 1."""
    from rewards.monitor import RewardMonitor

    monitor = RewardMonitor(DetectorConfig(window=20, enabled=["shortcut"]), "calc")
    fired = []
    for i, (n, s) in enumerate(zip(lengths, successes, strict=True)):
        summary = {"step": float(i + 1), "length": n, "success": s}
        if proxy_share is not None:
            summary.update(reward=1.0, proxy_reward=proxy_share)
        for alert in monitor.observe(summary):
            fired.append((i + 1, alert.message))
    return fired


def test_a_shortcut_slower_than_the_window_is_caught_against_the_runs_start():
    """The format-only hack as a later recording of it learned it: episodes 7.8 ->
    3.5 tokens over 26 steps, so the late half of every 20-step window is 0.73-0.76
    of its early half (never the 0.67 the window asks), success flat at 0.1. Against
    the run's start (7.8) the fall is plain."""
    import random

    rng = random.Random(0)
    lengths = [7.8 + rng.uniform(-0.2, 0.2) for _ in range(8)]
    lengths += [7.8 - 4.3 * k / 26 + rng.uniform(-0.2, 0.2) for k in range(1, 27)]
    lengths += [3.5 + rng.uniform(-0.2, 0.2) for _ in range(10)]
    flat = [0.1] * len(lengths)
    from rewards.detectors_health import halves

    for end in range(20, len(lengths) + 1):  # no window falls to 0.67 of itself
        early, late = halves(lengths[end - 20 : end])
        assert late / early > 0.67
    fired = _shortcut_alerts(lengths, flat)
    assert len(fired) == 1, fired
    step, message = fired[0]
    assert 20 <= step <= 34  # while the fall goes on, not after it
    assert message.startswith("shortcut: episodes 7.8 -> ")
    assert message.endswith("while success 0.10 -> 0.10 (from the run's start)")
    # the same fall while success rose since the start: learning to be concise
    rising = [min(0.1 + 0.02 * i, 0.9) for i in range(len(lengths))]
    assert _shortcut_alerts(lengths, rising) == []
    # ... or while the task terms pay 40% of the reward: the format-only hack's
    # healthy twin drifted the same way (its proxy terms paid 57-74%), unpaid for it
    assert _shortcut_alerts(lengths, flat, proxy_share=0.6) == []
    # a trainer that reports no proxy terms is judged by its windows alone
    assert _shortcut_alerts(lengths, flat, proxy_share=None) == []


def test_a_noisy_start_is_no_start_level_to_fall_from():
    """The newcomer's 4 x 4 run whose first step was 10 tokens: its first five steps
    average 5.05 and the later ones 3.4 (0.67 of it), but that start is known only
    to +-1.3 tokens: not a fall of 2 standard errors."""
    noisy = [10, 4.625, 2.938, 5.062, 2.625, 4.125, 4.875, 2.0]
    noisy += [2.625, 4.125, 4.875, 2.0, 3.1, 3.9, 2.4, 4.2]
    assert _shortcut_alerts(noisy, [0.0] * len(noisy)) == []


def test_shortcut_evidence_from_the_start_says_so():
    rows = [{"length": 3.0, "success": 0.0}]
    ev = {"length_early": 7.5, "since": "at the run's start"}
    picked, _ = pick("shortcut", rows, ev, CFG)
    assert picked[0][1] == "3 tokens (0.4x the run's start), not solved"


def test_the_proxy_share_is_read_from_the_late_steps_that_report_it():
    """A trainer that reported its proxy terms for the first 12 steps only: their
    share then (0.95) is not the late half's, which nobody reported."""
    from rewards.monitor import RewardMonitor

    monitor = RewardMonitor(DetectorConfig(window=20, enabled=["shortcut"]), "calc")
    lengths = [7.8] * 8 + [7.8 - 4.3 * k / 26 for k in range(1, 27)] + [3.5] * 10
    fired = []
    for i, n in enumerate(lengths, start=1):
        summary = {"step": float(i), "length": n, "success": 0.1, "reward": 1.0}
        if i <= 12:
            summary["proxy_reward"] = 0.95
        fired += monitor.observe(summary)
    assert fired == []
