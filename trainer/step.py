"""One training step, as stages: sample -> score -> update -> observe -> record.

Each stage is a function of the run's :class:`StepContext` (what stays the same for the
whole run), the run's mutable :class:`~trainer.checkpoint.TrainState` where it needs it
(the task stream, the sampling generator, the adaptive KL coefficient: what a
checkpoint saves) and the frozen result of the stage before it. Every process runs
every stage; ``ctx.par`` (:class:`~trainer.single.Single` alone,
:class:`~trainer.distributed.Parallel` among several) supplies the collectives that
join them, so no stage asks whether it is distributed. Rank 0 speaks for the step:
its sink receives the events, and the metrics, the detectors and the recording policy
see the whole step there.

This module knows nothing of Django, of how rewards are computed or of checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from rewards.types import Monitor, RewardFn
from trainer.algorithms import ResolvedAlgorithm, mismatch_metrics
from trainer.batch import Batch, collate, token_advantages
from trainer.checkpoint import TrainState
from trainer.config import TrainConfig
from trainer.distributed import merge_sampled
from trainer.engines import RolloutEngine
from trainer.envs.base import Environment
from trainer.evaluate import due as evaluation_due
from trainer.evaluate import evaluate
from trainer.events import Sink
from trainer.fsdp import gathered as unsharded
from trainer.kl_control import kl_in_reward, kl_step
from trainer.metrics import step_metrics
from trainer.policy import AdaptersOff, Policy
from trainer.rollout import Rollout, mask_truncated
from trainer.sampled import Sampled
from trainer.sampling import sample
from trainer.scoring import Scores, score, score_chunk
from trainer.single import Handle
from trainer.step_report import (
    build_records,
    evidence_info,
    recorded_groups,
    row_means,
    takes_trajectories,
    token_rows,
    token_summaries,
)
from trainer.trajectory_events import alert_event
from trainer.update import Learner, on_policy, optimise


@dataclass(frozen=True)
class StepContext:
    """Everything a step reads and no step changes: built once by ``train``."""

    config: TrainConfig
    algo: ResolvedAlgorithm
    env: Environment
    reward_fn: RewardFn
    policy: Policy
    ref: Policy | AdaptersOff | None  # the frozen KL reference; None: no KL term
    optimizer: torch.optim.Optimizer
    sink: Sink  # rank 0's is the run's; the others' is never written to
    monitor: Monitor | None  # the detectors, on rank 0
    par: Handle

    @property
    def learner(self) -> Learner:
        return Learner(
            self.policy,
            self.optimizer,
            self.algo,
            self.config.optim,
            self.config.rollout.max_total_tokens,
            self.par,
        )


@dataclass(frozen=True)
class Drawn:
    """Sample's result: this process's rollouts, scored by the reward function."""

    sampled: Sampled
    kept_idx: list[int]  # the rollouts of the groups kept for the update
    # Every process updates or none does: a process whose groups were all dropped
    # takes part with its rollouts and nothing trained (a zero gradient).
    updates: bool

    @property
    def kept(self) -> list[Rollout]:
        return [self.sampled.rollouts[i] for i in self.kept_idx]


@dataclass(frozen=True)
class Scored:
    """Score's result: the batch the update trains on and what it trains towards."""

    batch: Batch
    scores: Scores
    advantages: torch.Tensor  # (B, T-1), 0 on untrained tokens
    returns: torch.Tensor | None  # (B, T-1) the value head's targets; None: no critic
    per_traj: torch.Tensor  # (B,) one advantage per trajectory, for display
    kl_reward: float | None  # the mean KL taken into the rewards, if it was


@dataclass(frozen=True)
class Learned:
    """Update's result, per rollout of this process where it is per rollout."""

    metrics: dict[str, float]  # the whole batch's (every process's)
    new_logprobs: torch.Tensor | None  # (B, T-1) the last epoch's; None: no update
    per_traj_adv: list[float]
    row_entropy: list[float]  # per kept rollout: mean over its trained tokens


@dataclass(frozen=True)
class Observed:
    """Observe's result; ``whole`` is the whole step on rank 0, None elsewhere."""

    whole: Sampled | None
    metrics: dict[str, float]
    alerts: list[Any]


def train_step(
    ctx: StepContext, state: TrainState, step: int, extra: dict[str, float] | None
) -> dict[str, float]:
    """One step; ``extra``: metrics to log with it (the warm start's, at step 1).
    Returns the step's metrics (on ranks other than 0, only their records' cost)."""
    t_start = time.perf_counter()
    drawn = sample_step(ctx, state, step)
    t_update = time.perf_counter()
    scored = None
    if drawn.updates:
        scored = score_step(ctx, state, drawn)
        learned = update(ctx, state, drawn, scored)
        ctx.policy.engine.load_weights()  # the next rollout samples the new weights
    else:  # every group dropped: no update, but the policy's entropy is still news
        learned = entropy_only(ctx, drawn)
    t_end = time.perf_counter()
    timing = {
        "gen": drawn.sampled.gen_s,
        "reward": drawn.sampled.reward_s,
        "update": t_end - t_update,
        "step": t_end - t_start,
    }
    seen = observe(ctx, step, drawn, learned, timing, extra)
    return record(ctx, step, drawn, scored, learned, seen)


# ----- sample --------------------------------------------------------------------
def sample_step(ctx: StepContext, state: TrainState, step: int) -> Drawn:
    """Roll out this process's share of the step's tasks and score them. The
    engine is awake for the rollout only (an external one frees the device for the
    update)."""
    engine = ctx.policy.engine
    engine.wake()
    with unsharded(ctx.policy, ctx.par), _asleep_after(engine):
        sampled = sample(
            step,
            ctx.config,
            ctx.algo,
            ctx.env,
            ctx.reward_fn,
            ctx.policy,
            state,
            ctx.par,
        )
    kept_idx = [i for i, k in enumerate(sampled.kept) if k]
    return Drawn(sampled, kept_idx, updates=ctx.par.any(bool(kept_idx)))


@contextmanager
def _asleep_after(engine: RolloutEngine) -> Iterator[None]:
    try:
        yield
    finally:
        engine.sleep()


# ----- score ---------------------------------------------------------------------
def score_step(ctx: StepContext, state: TrainState, drawn: Drawn) -> Scored:
    """The batch, the sampling policy's and the reference's view of it, the KL in the
    rewards (if so configured) and the advantages."""
    algo, policy, sampled, kept = ctx.algo, ctx.policy, drawn.sampled, drawn.kept
    if kept:
        rows = kept
        row_results = [sampled.results[i] for i in drawn.kept_idx]
    else:  # nothing of this process's trains: its rollouts with nothing trained
        rows, row_results = sampled.rollouts, sampled.results
    if algo.mask_truncated:  # DAPO's overlong filtering: no gradient from them
        mask_truncated(sampled.rollouts)
    batch = collate(rows, policy.pad_id, policy.device)
    if not kept:
        batch.loss_mask.zero_()
    policy_pass = not on_policy(algo, ctx.config.optim)
    # fsdp: gathered for the policy's own pass only (the reference is whole).
    with unsharded(policy, ctx.par) if policy_pass else nullcontext():
        scores = score(
            policy,
            ctx.ref,
            batch,
            score_chunk(ctx.config.optim, batch.input_ids.shape[1]),
            policy_pass=policy_pass,
        )
    kl_reward, results = kl_in_reward(algo, state, batch, scores, row_results, ctx.par)
    adv, returns, per_traj = token_advantages(
        algo, batch, results, ctx.config.rollout.group_size, scores.values, ctx.par
    )
    return Scored(batch, scores, adv, returns, per_traj, kl_reward)


# ----- update --------------------------------------------------------------------
def update(
    ctx: StepContext, state: TrainState, drawn: Drawn, scored: Scored
) -> Learned:
    """The optimisation epochs, then the update's metrics over the whole batch and
    the KL controller's move."""
    batch, scores, adv = scored.batch, scored.scores, scored.advantages
    metrics, new_lp = optimise(
        ctx.learner, batch, scores, adv, scored.returns, generator=state.sample_gen
    )
    metrics.update(token_summaries(batch.loss_mask, adv, scores.entropy))
    row_entropy = row_means(scores.entropy, batch.loss_mask) if drawn.kept else []
    mismatch = {}
    if batch.sampler_logprobs is not None:
        mismatch = mismatch_metrics(
            scores.old_logprobs, batch.sampler_logprobs, batch.loss_mask
        )
    # The whole batch's numbers, before the KL controller. Every process reduces
    # its mismatch, an empty one too: a process whose rows carry no sampler
    # log-probs would otherwise leave the others waiting in the collective.
    trained = float(batch.loss_mask.sum())
    metrics = ctx.par.reduce_metrics(metrics, trained)
    mismatch = ctx.par.reduce_metrics(mismatch, trained)
    samples = int(ctx.par.all_sum([len(drawn.kept_idx)])[0])
    kl = metrics.get("kl", scored.kl_reward)
    metrics.update(kl_step(ctx.algo, state, scores, kl, samples))
    metrics.update(mismatch)
    per_traj_adv = [0.0] * len(drawn.sampled.rollouts)
    for j, i in enumerate(drawn.kept_idx):
        per_traj_adv[i] = float(scored.per_traj[j])
    return Learned(metrics, new_lp, per_traj_adv, row_entropy)


def entropy_only(ctx: StepContext, drawn: Drawn) -> Learned:
    """No process trains this step: the policy's entropy over every rollout."""
    sampled = drawn.sampled
    batch = collate(sampled.rollouts, ctx.policy.pad_id, ctx.policy.device)
    with unsharded(ctx.policy, ctx.par):
        chunk = score_chunk(ctx.config.optim, batch.input_ids.shape[1])
        ent = score(ctx.policy, None, batch, chunk).entropy
    sel = batch.loss_mask > 0
    metrics = {"entropy": float(ent[sel].mean()) if bool(sel.any()) else float("nan")}
    metrics = ctx.par.reduce_metrics(metrics, float(sel.sum()))
    return Learned(metrics, None, [0.0] * len(sampled.rollouts), [])


# ----- observe -------------------------------------------------------------------
def observe(
    ctx: StepContext,
    step: int,
    drawn: Drawn,
    learned: Learned,
    timing: dict[str, float],
    extra: dict[str, float] | None,
) -> Observed:
    """The whole step on rank 0: its metrics, any evaluation, the detectors' alerts."""
    sampled = drawn.sampled
    sampled.row_entropy = [None] * len(sampled.rollouts)
    for j, i in enumerate(drawn.kept_idx[: len(learned.row_entropy)]):
        sampled.row_entropy[i] = learned.row_entropy[j]
    parts = ctx.par.gather(sampled)  # every process's, in global group order
    whole = merge_sampled(parts) if parts is not None else None
    evaluation: dict[str, float] = {}
    if evaluation_due(ctx.config, step):  # the policy after this step's update
        with unsharded(ctx.policy, ctx.par):  # fsdp: every rank gathers, rank 0 plays
            if whole is not None:
                evaluation = evaluate(
                    ctx.policy, ctx.env, ctx.reward_fn, ctx.config, step
                )
    if whole is None:
        return Observed(None, {}, [])
    metrics = step_metrics(ctx.config, whole, learned.metrics, timing)
    metrics.update(extra or {})
    metrics.update(evaluation)
    alerts = []
    if ctx.monitor is not None:  # before the records: an alert's groups are recorded
        episodes = [r.episode for r in whole.rollouts]
        if takes_trajectories(ctx.monitor):
            info = evidence_info(whole)
            alerts = ctx.monitor(
                step, metrics, episodes, whole.results, trajectories=info
            )
        else:  # a monitor written before alerts named their trajectories
            alerts = ctx.monitor(step, metrics, episodes, whole.results)
    return Observed(whole, metrics, alerts)


# ----- record --------------------------------------------------------------------
def record(
    ctx: StepContext,
    step: int,
    drawn: Drawn,
    scored: Scored | None,
    learned: Learned,
    seen: Observed,
) -> dict[str, float]:
    """The step's events to rank 0's sink: the step, the recorded trajectories (with
    their judgements and critical paths), the alerts. Records are costly: built only
    when the sink listens, before the step event so that it can say what they cost."""
    metrics = dict(seen.metrics)
    records: list[dict[str, Any]] = []
    if ctx.par.listening:
        t_records = time.perf_counter()
        records = _records(ctx, step, drawn, scored, learned, seen)
        metrics["timing_s/records"] = time.perf_counter() - t_records
    if seen.whole is None:  # a rank other than 0: rank 0 speaks for the step
        return metrics
    ctx.sink.emit({"type": "step", "step": step, "metrics": metrics})
    for event in records:
        ctx.sink.emit(event)
    for alert in seen.alerts:
        ctx.sink.emit(alert_event(alert))
    return metrics


def _records(
    ctx: StepContext,
    step: int,
    drawn: Drawn,
    scored: Scored | None,
    learned: Learned,
    seen: Observed,
) -> list[dict[str, Any]]:
    """Every process's records of the groups rank 0's recording policy chose, each
    once, on rank 0 (an empty list elsewhere)."""
    sampled = drawn.sampled
    mine = None
    if ctx.par.main:
        mine = recorded_groups(ctx.config, step, seen.whole, seen.alerts)
    chosen = ctx.par.broadcast(mine)
    arrays: list[dict[str, list[float]] | None] = [None] * len(sampled.rollouts)
    if scored is not None and drawn.kept and chosen.token_arrays and chosen.groups:
        batch, scores = scored.batch, scored.scores
        rows = token_rows(
            batch.attention_mask,
            batch.loss_mask,
            learned.new_logprobs,
            scores.old_logprobs,
            scores.entropy,
            scored.advantages,
            scores.token_masks,
        )
        for j, i in enumerate(drawn.kept_idx):
            arrays[i] = rows[j]
    records = build_records(
        step, sampled, arrays, learned.per_traj_adv, ctx.policy, chosen
    )
    gathered = ctx.par.gather(records)
    return [r for part in gathered or [] for r in part]
