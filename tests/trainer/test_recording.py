"""The recording policy: which groups of which steps are stored, on its own and
applied by the training loop (before the records are built)."""

from __future__ import annotations

import pytest

from rewards.types import Alert, RewardBreakdown, RewardResult
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.recording_policy import (
    RecordConfig,
    alerted_groups,
    describe,
    group_budget,
    select,
)

# Group means: 0 -> 1.0 (best), 1 -> 0.0 (worst), the others in between.
REWARDS = {0: [1.0, 1.0], 1: [0.0, 0.0], 2: [0.5, 0.5], 3: [0.2, 0.4], 4: [0.9, 0.7]}


def test_a_bounded_step_keeps_best_worst_alerted_and_a_seeded_sample():
    policy = RecordConfig(groups=3)
    pick = select(policy, 5, REWARDS, alerted={3}, seed=7)
    assert pick.recorded and {0, 1, 3} <= pick.groups
    # 3 groups: best, worst, one sampled from {2, 3, 4}; the alerted 3 on top.
    assert len(pick.groups - {3}) in (2, 3) and len(pick.groups) <= 4
    assert select(policy, 5, REWARDS, alerted={3}, seed=7) == pick  # replayable
    samples = {select(policy, s, REWARDS, seed=7).groups - {0, 1} for s in range(40)}
    assert samples == {frozenset({2}), frozenset({3}), frozenset({4})}


def test_unscored_rollouts_do_not_count_in_a_groups_mean():
    rewards = {0: [None, 0.1], 1: [float("nan"), 0.9], 2: [None], 3: [0.5]}
    pick = select(RecordConfig(groups=2), 1, rewards)
    assert pick.groups == {0, 1}  # worst 0.1, best 0.9; group 2 has no mean


def test_every_nth_step_only_and_metrics_are_not_its_business():
    policy = RecordConfig(every=4, groups=None)
    recorded = [s for s in range(1, 13) if select(policy, s, REWARDS).recorded]
    assert recorded == [4, 8, 12]
    assert select(policy, 3, REWARDS).groups == frozenset()
    assert select(policy, 8, REWARDS).groups == set(REWARDS)


def test_auto_keeps_small_steps_whole_and_bounds_big_ones_to_64_rollouts():
    auto = RecordConfig()
    assert group_budget(auto, 8, 64) == 8  # 8 groups of 8: everything
    assert group_budget(auto, 32, 256) == 8  # 32 groups of 8: 64 rollouts' worth
    assert group_budget(auto, 256, 256) == 64  # groups of 1
    assert group_budget(RecordConfig(groups=None), 32, 256) == 32
    # The run's plan decides where it is known: DAPO's resampled groups are kept.
    assert group_budget(auto, 10, 80, planned=64) == 10
    assert group_budget(auto, 40, 320, planned=256) == 8
    big = {g: [g / 10] * 8 for g in range(32)}
    assert len(select(auto, 1, big).groups) == 8


def test_alerts_point_at_groups_through_their_evidence():
    evidences = [{"group": 2}, {"groups": [4, 5, "x", True]}, {"window": [1, 3]}, None]
    assert alerted_groups(evidences) == {2, 4, 5}


def test_bad_record_config_names_the_field():
    from trainer.config import format_errors

    for bad in ({"groups": 0}, {"groups": "all"}, {"every": 0}, {"arrays": True}):
        with pytest.raises(ValueError) as info:
            TrainConfig.model_validate({"record": bad})
        assert format_errors(info.value)[0].startswith("record.")


def test_the_run_page_line_says_what_is_recorded():
    assert (
        describe(RecordConfig(every=4, groups=8, token_arrays=False))
        == "trajectories every 4th step, 8 groups a step (best, worst, alerted, "
        "sampled), token arrays off"
    )
    assert describe(RecordConfig(), 12) == (
        "trajectories every step, all groups a step, token arrays on"
    )


class _PointAtGroup:
    """A monitor that raises one alert on step 2, pointing at group 4 (written
    before monitors were told where the rollouts are stored: still called)."""

    def __call__(self, step, metrics, episodes, results):
        if step != 2:
            return []
        return [Alert("test", "warning", "look at group 4", step, {"group": 4})]


def _run(record, reward_fn):
    cfg = TrainConfig.model_validate(
        {
            "steps": 4,
            "seed": 3,
            "env": {"name": "calc"},
            "rollout": {"tasks_per_step": 6, "group_size": 2, "max_turns": 2},
            "record": record,
        }
    )
    sink = ListSink()
    result = train(
        cfg, make_env("calc", seed=0), reward_fn, sink, monitor=_PointAtGroup()
    )
    assert result.status == "succeeded"
    return sink


def test_the_loop_records_exactly_the_groups_the_policy_promises(reward_fn):
    full = _run({"groups": None}, reward_fn)
    bounded = _run({"every": 2, "groups": 3, "token_arrays": False}, reward_fn)
    steps = [e["step"] for e in bounded.of_type("step") if e["step"] > 0]
    assert steps == [1, 2, 3, 4]  # metrics on every step
    full_metrics = [e["metrics"]["reward"] for e in full.of_type("step")]
    assert [e["metrics"]["reward"] for e in bounded.of_type("step")] == full_metrics
    for step in (1, 2, 3, 4):
        rewards: dict[int, list] = {}
        for t in full.of_type("trajectory"):
            if t["step"] == step:
                rewards.setdefault(t["group"], []).append(t["reward"])
        kept = {t["group"] for t in bounded.of_type("trajectory") if t["step"] == step}
        if step % 2:
            assert kept == set()
            continue
        means = {g: sum(v) / len(v) for g, v in rewards.items()}
        best = max(means, key=lambda g: (means[g], g))
        worst = min(means, key=lambda g: (means[g], g))
        expected = select(RecordConfig(groups=3), step, rewards, alerted=(), seed=3)
        promised = set(expected.groups) | ({4} if step == 2 else set())
        assert kept == promised and {best, worst} <= kept
        assert len(kept - {4}) <= 3 and (step != 2 or 4 in kept)
    for t in bounded.of_type("trajectory"):  # token arrays off: text and n only
        assert all(
            set(s) == {"turn", "kind", "role", "text", "mask", "n"}
            for s in t["segments"]
        )


def _run_monitored(record, reward_fn):
    from rewards.config import DetectorConfig
    from rewards.monitor import RewardMonitor

    # Length drift at a growth of 1x fires whenever a step's rollouts are not shorter
    # than the step before; its evidence is the rollouts at least that long.
    detectors = DetectorConfig(
        enabled=["length_drift"],
        window=2,
        min_steps=2,
        # judged from the first step (no warm-up for a fresh policy)
        thresholds={"length_drift.max_growth": 1.0, "length_drift.after_windows": 0},
    )
    cfg = TrainConfig.model_validate(
        {
            "steps": 3,
            "seed": 3,
            "env": {"name": "calc"},
            "rollout": {"tasks_per_step": 4, "group_size": 2, "max_turns": 2},
            "record": record,
        }
    )
    sink = ListSink()
    monitor = RewardMonitor(detectors, "calc")
    assert train(cfg, make_env("calc", seed=0), reward_fn, sink, monitor=monitor)
    return sink


def test_the_loop_names_the_rollouts_an_alert_fired_on_and_records_their_groups(
    reward_fn,
):
    full = _run_monitored({"groups": None}, reward_fn)
    bounded = _run_monitored({"groups": 1, "every": 1000}, reward_fn)
    alerts = full.of_type("alert")
    assert alerts and alerts == bounded.of_type("alert")
    for alert in alerts:
        step, early = alert["step"], alert["evidence"]["length_early"]
        rollouts = [t for t in full.of_type("trajectory") if t["step"] == step]
        named = [(t["group"], t["index"]) for t in alert["trajectories"]]
        # Exactly the rollouts at least as long as the early half's mean length.
        assert named == [
            (t["group"], t["index"]) for t in rollouts if t["length"] >= early
        ]
        assert 0 < len(named) < len(rollouts)
        assert all(t["task_id"] and t["why"] for t in alert["trajectories"])
        # The bounded run (1 group, and no step is a recorded one) keeps exactly the
        # groups the alert points at, and every named rollout is stored.
        kept = {
            (t["group"], t["index"])
            for t in bounded.of_type("trajectory")
            if t["step"] == step
        }
        groups = {g for g, _ in named}
        assert {g for g, _ in kept} == groups
        assert set(named) <= kept
    unalerted = {s["step"] for s in full.of_type("step")} - {a["step"] for a in alerts}
    assert not any(t["step"] in unalerted for t in bounded.of_type("trajectory"))


def _coin_reward(episodes, step):
    """1 or 0 by the parity of an episode's action tokens: about half of the groups
    of two agree (zero variance, which DAPO drops and resamples)."""
    out = []
    for ep in episodes:
        win = float(sum(ep.facts.get("action_tokens", ())) % 2)
        n = max(1, len(ep.steps))
        out.append(
            RewardResult(
                RewardBreakdown(
                    total=win,
                    components={"outcome": win},
                    per_step={"outcome": (0.0,) * (n - 1) + (win,)},
                )
            )
        )
    return out


def test_dynamic_sampling_keeps_every_group_of_a_small_run():
    """DAPO resamples zero-variance groups: a run planned at 32 groups of 2 (64
    rollouts, "all groups" on its page) trains steps of more groups than that.
    ``auto`` judges by the plan, so every group a step sampled is recorded, the
    resampled ones and those dropped alike (judged by the step, it kept 32 of them)."""
    cfg = TrainConfig.model_validate(
        {
            "steps": 2,
            "seed": 0,
            "env": {"name": "calc"},
            "rollout": {"tasks_per_step": 32, "group_size": 2, "max_turns": 1},
            "algorithm": {"preset": "dapo"},
        }
    )
    sink = ListSink()
    env = make_env("calc", seed=0)
    assert train(cfg, env, _coin_reward, sink).status == "succeeded"
    assert describe(cfg.record, 64) == (
        "trajectories every step, all groups a step, token arrays on"
    )
    grew = 0
    for ev in sink.of_type("step"):
        if ev["step"] < 1:
            continue
        trajs = [t for t in sink.of_type("trajectory") if t["step"] == ev["step"]]
        groups = {t["group"] for t in trajs}
        trained = {t["group"] for t in trajs if not t["dropped"]}
        dropped = {t["group"] for t in trajs if t["dropped"]}
        assert len(dropped) == ev["metrics"]["groups_dropped"], ev["step"]
        assert groups == set(range(len(groups))) and trained, ev["step"]
        assert len(trajs) == 2 * len(groups)
        grew += len(groups) > 32
    assert grew  # some step sampled past its plan (else this tests nothing)
