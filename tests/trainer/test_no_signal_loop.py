"""A run whose every group had identical rewards raises ``no_learning_signal`` from the trainer
(issue 22, item 9): the trainer's own detectors, through the real loop."""

from __future__ import annotations

from rewards import build_monitor, build_reward_fn
from rewards.types import RewardBreakdown, RewardResult
from trainer import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

CFG = {
    "steps": 6,
    "env": {"name": "calc"},
    "model": {"warmstart_steps": 0},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    "reward": {
        "components": [{"name": "format", "weight": 1.0}],
        "detectors": {
            "enabled": ["no_learning_signal"],
            "window": 4,
            "thresholds": {"no_learning_signal.min_steps": 4},
        },
    },
}


def _flat(inner):
    """The environment's reward, paid alike to every rollout (0.5 each)."""

    def reward_fn(episodes, step):
        out = []
        for r in inner(episodes, step):
            b = r.breakdown
            per_step = {k: tuple(0.0 for _ in v) for k, v in b.per_step.items()}
            for k, v in per_step.items():
                per_step[k] = (*v[:-1], 0.5 / len(per_step)) if v else v
            flat = RewardBreakdown(
                0.5, {k: 0.5 / len(per_step) for k in per_step}, per_step
            )
            out.append(RewardResult(flat, metrics=dict(r.metrics)))
        return out

    return reward_fn


def _alerts(reward_wrapper) -> list[dict]:
    cfg = TrainConfig.model_validate(CFG)
    env = make_env(cfg.env.name, cfg.env.params, seed=cfg.seed)
    inner = build_reward_fn(cfg.reward, env_name=cfg.env.name)
    sink = ListSink()
    monitor = build_monitor(cfg.reward, env_name=cfg.env.name)
    result = train(cfg, env, reward_wrapper(inner), sink, monitor=monitor)
    assert result.status == "succeeded"
    zero = [e["metrics"]["frac_reward_zero_std"] for e in sink.of_type("step")]
    return zero, sink.of_type("alert")


def test_a_run_whose_groups_all_have_equal_rewards_raises_no_signal():
    zero, alerts = _alerts(_flat)
    assert zero == [1.0] * 6
    assert [(a["detector"], a["step"]) for a in alerts] == [("no_learning_signal", 4)]
    assert "no learning signal" in alerts[0]["message"]
