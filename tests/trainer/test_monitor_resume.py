"""The detectors' memory survives a resume (a pause, a lost worker, a demo yielding
to a user's run): the live swarm demo raised ``entropy_collapse`` at step 429 and
again at 438, its monitor fresh after each resume; a fresh monitor also took the
step it resumed at for the run's start."""

from __future__ import annotations

import json

from wiring import tiny, zero_reward

from rewards import build_monitor
from rewards.config import DetectorConfig
from rewards.monitor import RewardMonitor
from trainer.envs import make_env
from trainer.events import ListSink
from trainer.loop import train


def _monitor(cfg):
    from trainer.runner import reward_config_for

    rcfg = reward_config_for(cfg).model_copy(
        update={
            "detectors": DetectorConfig(
                window=6,
                min_steps=3,
                enabled=["no_learning_signal"],
                thresholds={"no_learning_signal.min_steps": 3},
            )
        }
    )
    return build_monitor(rcfg, env_name="calc")


def _alerts(sink):
    return [(a["step"], a["detector"]) for a in sink.of_type("alert")]


def test_a_resumed_run_does_not_alert_again_on_what_it_alerted_on(tmp_path):
    cfg = tiny(steps=8, checkpoint={"every": 0})
    whole = ListSink()
    env = make_env("calc", seed=cfg.seed)
    train(
        cfg,
        env,
        zero_reward,
        whole,
        monitor=_monitor(cfg),
        checkpoint_dir=tmp_path / "a",
    )
    assert _alerts(whole) == [(3, "no_learning_signal")]  # once: the pattern stays

    first = ListSink()
    stopped = train(
        cfg,
        make_env("calc", seed=cfg.seed),
        zero_reward,
        first,
        monitor=_monitor(cfg),
        checkpoint_dir=tmp_path / "b",
        should_stop=lambda: len(first.of_type("step")) >= 5,
        save_on_stop=lambda: True,  # a pause: the state at the stop kept
    )
    assert (stopped.status, stopped.last_step) == ("cancelled", 5)
    second = ListSink()
    train(
        cfg,
        make_env("calc", seed=cfg.seed),
        zero_reward,
        second,
        monitor=_monitor(cfg),
        checkpoint_dir=tmp_path / "b",
    )
    assert second.of_type("step")[0]["step"] == 6
    # Without the monitor's state in the checkpoint: (8, no_learning_signal) again.
    assert _alerts(first) + _alerts(second) == _alerts(whole)


def test_the_monitors_state_is_json_and_restores_it_whole():
    cfg = DetectorConfig(window=10, min_steps=2, enabled=["no_learning_signal"])
    steps = [
        {"step": s, "zero_std": 1.0, "length": float(s), "success": 0.0}
        for s in range(1, 21)
    ]
    whole, first = RewardMonitor(cfg, "calc"), RewardMonitor(cfg, "calc")
    seen = [a.step for s in steps for a in whole.observe(dict(s))]
    got = [a.step for s in steps[:10] for a in first.observe(dict(s))]
    second = RewardMonitor(cfg, "calc")
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert second.state_dict() == first.state_dict()
    got += [a.step for s in steps[10:] for a in second.observe(dict(s))]
    assert got == seen == [8]  # a fresh monitor would fire again at step 18
    fresh = RewardMonitor(cfg, "calc")
    assert [a.step for s in steps[10:] for a in fresh.observe(dict(s))] == [18]
    assert second.first == whole.first  # the run's start is its start
