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

Nor must a pause lose it: stopped where the run will resume (``save_on_stop``: a
demo yielding to a user's run, a server shutting down), its progress is kept in
``keep`` (:data:`WARM_FILE` beside the checkpoints: the weights, the optimiser, the
task stream and the steps done), and the next attempt of the same config goes on
from there, to the weights an unbroken warm start gives.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from trainer.batch import collate
from trainer.config import TrainConfig
from trainer.envs.base import Environment
from trainer.optimizer import build_optimizer
from trainer.policy import Policy
from trainer.rollout import scripted_rollouts

log = logging.getLogger(__name__)

WARM_FILE = "warmstart.pt"  # a stopped warm start's progress, beside the checkpoints

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
    *,
    keep: Path | None = None,
    resume: bool = True,
    save_on_stop: Callable[[], bool] | None = None,
) -> float | None:
    """Runs ``cfg.model.warmstart_steps`` steps of ``cfg.model.warmstart_batch``
    scripted episodes each; returns the last cross-entropy, or None when
    ``should_stop`` (asked before every step, as the RL loop does) ended it early.
    ``on_progress(steps done, last loss)``: see the module's docstring. ``keep``:
    where a stopped warm start leaves its progress when ``save_on_stop()`` says the
    run will resume, and (``resume``) where it goes on from."""
    episodes_per_step = cfg.model.warmstart_batch
    total = cfg.model.warmstart_steps
    reported_at: float | None = None
    rng = random.Random(cfg.seed * 7919 + 17)
    opt = build_optimizer(
        policy.model.parameters(),
        master_weights=cfg.optim.master_weights,
        lr=cfg.model.warmstart_lr,
    )
    first, last = 1, float("nan")
    if keep is not None and resume:
        first, last = _resume(keep, cfg, policy, opt, rng) or (first, last)
        if first > total:  # finished before the stop: only its weights were kept
            policy.eval()
            return last
    policy.train()
    for done in range(first, total + 1):
        if should_stop is not None and should_stop():
            if keep is not None and save_on_stop is not None and save_on_stop():
                save_progress(keep, cfg, policy, done - 1, last, opt, rng)
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


def save_progress(
    path: Path,
    cfg: TrainConfig,
    policy: Policy,
    done: int,
    loss: float,
    opt: torch.optim.Optimizer | None = None,
    rng: random.Random | None = None,
) -> None:
    """Write ``done`` warm-start steps' progress to ``path`` (atomically); a
    finished warm start (``done`` its every step) needs neither ``opt`` nor ``rng``."""
    if done < 1:
        return
    state = {
        "config": cfg.model_dump(mode="json"),
        "done": done,
        "loss": loss,
        "model": policy.model.state_dict(),
        "optimizer": None if opt is None else opt.state_dict(),
        "rng": None if rng is None else rng.getstate(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)
    log.info(
        "warm start: %d of %d steps kept in %s", done, cfg.model.warmstart_steps, path
    )


def _resume(
    path: Path,
    cfg: TrainConfig,
    policy: Policy,
    opt: torch.optim.Optimizer,
    rng: random.Random,
) -> tuple[int, float] | None:
    """The step to go on from and the last loss, with the weights, optimiser and
    task stream of a kept warm start of this config; None: none is kept."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a torn or foreign file: start over
        log.warning("warm start: %s unreadable (%s); starting over", path, exc)
        return None
    if state.get("config") != cfg.model_dump(mode="json"):
        log.warning("warm start: %s is another config's; starting over", path)
        return None
    done = int(state["done"])
    policy.model.load_state_dict(state["model"])
    if done < cfg.model.warmstart_steps:
        opt.load_state_dict(state["optimizer"])
        rng.setstate(_as_state(state["rng"]))
    log.info("warm start: going on after step %d (%s)", done, path)
    return done + 1, float(state["loss"])


def _as_state(value):
    """``random.Random.getstate()``'s tuples (a load may give lists)."""
    return (
        tuple(_as_state(v) for v in value) if isinstance(value, list | tuple) else value
    )
