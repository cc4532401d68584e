"""Evaluation on held-out tasks: ``eval/reward`` and ``eval/pass@k``.

Every ``eval.every`` steps the policy plays ``eval.samples`` rollouts (k) of each of
``eval.tasks`` held-out tasks (:meth:`Environment.held_out_tasks`), greedy or sampled.
The tasks and the sampling noise come from their own generators, seeded from the run's
seed alone, so every evaluation sees the same tasks (the curve compares like with
like) and training's random streams are untouched (a resumed run stays identical).
Nothing here updates the policy or records trajectories.
"""

from __future__ import annotations

import random

import torch

from rewards.types import RewardFn
from trainer.config import TrainConfig
from trainer.envs.base import Environment
from trainer.policy import Policy
from trainer.rollout import play

_SALT = 0x5EED_E7A1  # held-out streams: apart from the training seed's


def due(config: TrainConfig, step: int) -> bool:
    """Evaluate after this step's update: every ``every`` steps, and after the last."""
    every = config.eval.every
    return every > 0 and (step % every == 0 or step == config.steps)


def evaluate(
    policy: Policy,
    env: Environment,
    reward_fn: RewardFn,
    config: TrainConfig,
    step: int,
) -> dict[str, float]:
    """``eval/reward``: mean total reward of all rollouts; ``eval/pass@k``: share of
    tasks with at least one success among their k rollouts; ``eval/success``: share of
    successful rollouts (pass@1 estimated from k samples); ``eval/k``."""
    cfg = config.eval
    tasks = env.held_out_tasks(cfg.tasks, random.Random(config.seed ^ _SALT))
    rollout = config.rollout.model_copy(
        update={
            "group_size": cfg.samples,
            "temperature": 0.0 if cfg.greedy else config.rollout.temperature,
        }
    )
    generator = torch.Generator().manual_seed(config.seed ^ _SALT)
    rollouts = play(policy, env, tasks, rollout, generator=generator)
    results = reward_fn([ro.episode for ro in rollouts], step)
    k = cfg.samples
    success = [bool(ro.episode and ro.episode.facts.get("success")) for ro in rollouts]
    passed = [any(success[g * k : (g + 1) * k]) for g in range(len(tasks))]
    return {
        "eval/reward": sum(r.breakdown.total for r in results) / len(results),
        "eval/pass@k": sum(passed) / len(passed),
        "eval/success": sum(success) / len(success),
        "eval/k": float(k),
    }
