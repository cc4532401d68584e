"""Sampling a step: roll out the step's tasks and score them.

With DAPO's dynamic sampling, groups whose rewards are all equal are dropped and new
tasks drawn until the step holds its ``tasks_per_step`` groups; with several
processes each rank plays its share (``trainer.distributed``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from rewards.types import RewardFn
from trainer.algorithms import ResolvedAlgorithm, zero_variance_groups
from trainer.checkpoint import TrainState
from trainer.config import TrainConfig
from trainer.envs.base import Environment
from trainer.policy import Policy
from trainer.rollout import play
from trainer.sampled import Sampled

if TYPE_CHECKING:
    from trainer.single import Handle


def sample(
    step: int,
    config: TrainConfig,
    algo: ResolvedAlgorithm,
    env: Environment,
    reward_fn: RewardFn,
    policy: Policy,
    state: TrainState,
    par: Handle,
) -> Sampled:
    """Roll out and score. DAPO's dynamic sampling (arXiv 2503.14476 §3.2): groups whose
    rewards are all equal carry no gradient, so they are dropped and new tasks sampled
    until the batch holds ``tasks_per_step`` groups or the round cap is hit.

    Each process plays its share of the step's tasks (and of each resampling
    round's), numbered after the lower ranks' groups; alone, all of them."""
    G = config.rollout.group_size
    need = par.share(config.rollout.tasks_per_step)
    out = Sampled([], [], [], 0)
    rounds = 1 + (
        algo.max_resample_rounds if algo.group_filter == "drop_zero_variance" else 0
    )
    kept_groups = 0
    for _ in range(rounds):
        # Every rank takes part in every round, if only to draw in step; None: no
        # rank misses a group, the step is full.
        tasks = par.my_tasks(env, need - kept_groups, state.task_rng)
        if tasks is None:
            break
        if not tasks:
            continue
        t0 = time.perf_counter()
        rollouts = play(
            policy,
            env,
            tasks,
            config.rollout,
            generator=state.sample_gen,
            first_group=len(out.rollouts) // G,
        )
        t1 = time.perf_counter()
        results = reward_fn([ro.episode for ro in rollouts], step)
        out.gen_s += t1 - t0
        out.reward_s += time.perf_counter() - t1
        keep = [True] * len(tasks)
        if algo.group_filter == "drop_zero_variance":
            totals = torch.tensor(
                [r.breakdown.total for r in results], dtype=torch.float32
            )
            keep = [not z for z in zero_variance_groups(totals, G).tolist()]
        out.rollouts += rollouts
        out.results += results
        out.kept += [k for k in keep for _ in range(G)]
        out.groups_dropped += keep.count(False)
        kept_groups += keep.count(True)
    offset = par.group_offset(len(out.rollouts) // G)
    for ro in out.rollouts:
        ro.group += offset
    return out
