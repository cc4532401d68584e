"""Warm start: teach a from-scratch model the action grammar before RL.

The default policy is randomly initialised, so it cannot yet write ``calc 3 + 4`` at all
and RL would wait a long time for a first reward. A few behaviour-cloning steps on
*random well-formed* actions (``EnvSession.random_action``) teach the format and leave
the choice of action near uniform: what the policy then learns about *which* action is
good comes from RL alone. Runs before step 1 with its own optimiser and RNG.

A long warm start (300 steps took 11 minutes on two loaded cores) must not look dead:
``on_progress(done, loss)`` is called after the first step, then whenever
:data:`PROGRESS_EVERY_S` passed since the last call, and after the last step; the
loop turns it into ``warmstart`` events, which are also the run's heartbeat (a
dashboard marks a silent external run ``lost``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import torch

from trainer.batch import collate
from trainer.config import TrainConfig
from trainer.envs.base import Environment
from trainer.policy import Policy
from trainer.rollout import scripted_rollouts

# Often enough for a live page and far inside any heartbeat timeout (the dashboard's
# EXTERNAL_RUN_TIMEOUT defaults to 600 s), rarely enough to cost nothing.
PROGRESS_EVERY_S = 5.0


def warmstart(
    policy: Policy,
    env: Environment,
    cfg: TrainConfig,
    should_stop: Callable[[], bool] | None = None,
    on_progress: Callable[[int, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> float | None:
    """Runs ``cfg.model.warmstart_steps`` steps of ``cfg.model.warmstart_batch``
    scripted episodes each; returns the last cross-entropy, or None when
    ``should_stop`` (asked before every step, as the RL loop does) ended it early.
    ``on_progress(steps done, last loss)``: see the module's docstring."""
    episodes_per_step = cfg.model.warmstart_batch
    total = cfg.model.warmstart_steps
    reported_at: float | None = None
    rng = random.Random(cfg.seed * 7919 + 17)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.model.warmstart_lr)
    policy.train()
    last = float("nan")
    for done in range(1, total + 1):
        if should_stop is not None and should_stop():
            policy.eval()
            return None
        tasks = env.sample_tasks(episodes_per_step, rng)
        rollouts = scripted_rollouts(
            policy,
            env,
            tasks,
            rng=rng,
            max_turns=cfg.rollout.max_turns,
            max_total_tokens=cfg.rollout.max_total_tokens,
        )
        batch = collate(rollouts, policy.pad_id, policy.device)
        st = policy.token_stats(
            batch.input_ids,
            batch.attention_mask,
            start=batch.first_trained(),
            prefixes=batch.prefixes,
        )
        mask = batch.loss_mask
        loss = -(st.logprobs * mask).sum() / mask.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        opt.step()
        last = float(loss.detach())
        due = reported_at is None or clock() - reported_at >= PROGRESS_EVERY_S
        if on_progress is not None and (due or done == total):
            on_progress(done, last)
            reported_at = clock()
    policy.eval()
    return last
