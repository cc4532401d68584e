"""No learning signal is a warning (issue 22.9): when nearly every group's rewards are
identical for many steps, the ``no_learning_signal`` detector says so, in the trainer
(an alert event) and on the server (an external run's alert), and stays quiet on a run
whose groups disagree or on too few steps."""

from __future__ import annotations

from rewards.config import DetectorConfig
from rewards.detectors import DETECTORS
from rewards.detectors_health import no_learning_signal
from trainer.config import TrainConfig
from trainer.events import ListSink
from trainer.runner import run_from_config

CFG = DetectorConfig(window=20, min_steps=4)


def window(fracs):
    return [{"step": float(i + 1), "zero_std": f} for i, f in enumerate(fracs)]


def test_it_fires_when_every_group_stays_equal():
    found = no_learning_signal(window([1.0] * 8), CFG)
    assert found is not None and found.message.startswith("no learning signal: 100%")
    assert found.evidence["frac_reward_zero_std"] == [1.0] * 8
    assert DETECTORS.get("no_learning_signal").severity == "warning"


def test_it_waits_for_enough_steps():
    assert no_learning_signal(window([1.0] * 7), CFG) is None


def test_it_stays_quiet_while_groups_disagree_or_start_to():
    assert (
        no_learning_signal(window([0.6, 0.8, 0.7, 0.9, 0.5, 0.6, 0.7, 0.8]), CFG)
        is None
    )
    # equal early (a fresh policy failing everything), signal later: not a warning
    assert no_learning_signal(window([1.0] * 8 + [0.5] * 8), CFG) is None


def test_the_evidence_names_the_rollouts_of_equal_groups():
    from rewards.evidence import mark_equal_groups, pick

    rows = [{"reward": r} for r in (1.0, 1.0, 0.0, 1.0, 0.5)]
    mark_equal_groups(rows, [0, 0, 1, 1, 2])  # group 2 has one rollout: no verdict
    picked, matched = pick("no_learning_signal", rows, {}, CFG)
    assert [i for i, _ in picked] == [0, 1] and matched == 2
    assert [why for _, why in picked] == ["both rollouts of its group got 1"] * 2
    rows = [{"reward": 0.0} for _ in range(3)] + [{}, {}]
    mark_equal_groups(rows, [0, 0, 0, 1, 1])  # group 1: no reward, no verdict
    picked, _ = pick("no_learning_signal", rows, {}, CFG)
    assert [why for _, why in picked] == ["all 3 rollouts of its group got 0"] * 3


def test_the_threshold_is_a_setting():
    cfg = DetectorConfig(thresholds={"no_learning_signal.min_frac": 0.5})
    assert no_learning_signal(window([0.6] * 8), cfg) is not None


def test_a_run_whose_reward_never_varies_raises_the_alert_in_the_loop():
    cfg = TrainConfig.model_validate(
        {
            "steps": 10,
            "seed": 0,
            "env": {"name": "calc"},
            "model": {"size": "tiny", "warmstart_steps": 0},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_action_tokens": 4},
            # a reward that pays nothing, whatever the policy does
            "reward": {"components": [{"name": "outcome", "weight": 0.0}]},
        }
    )
    sink = ListSink()
    assert run_from_config(cfg, sink).status == "succeeded"
    alerts = [a for a in sink.of_type("alert") if a["detector"] == "no_learning_signal"]
    assert alerts and alerts[0]["step"] <= 10
    # its evidence: the rollouts of equal groups (here, every rollout of the step)
    named = alerts[0]["trajectories"]
    assert len(named) == 4 and named[0]["why"] == "both rollouts of its group got 0"
    steps = sink.of_type("step")
    assert all(s["metrics"]["frac_reward_zero_std"] == 1.0 for s in steps)
