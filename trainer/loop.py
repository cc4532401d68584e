"""The training loop: rollout -> rewards -> advantages -> loss -> optimiser step -> events.

``train(config, env, reward_fn, sink)`` is the whole trainer. It knows nothing of Django,
Celery or how rewards are computed: the reward function and the detector monitor are
callables handed in (``trainer.runner`` wires the ones from ``rewards``). Every step
emits a ``step`` event with TRL/verl-named metrics and one ``trajectory`` event per
rollout with per-token arrays; see ``trainer.events`` for the shapes.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rewards.types import Monitor, RewardFn
from trainer.algorithms import ResolvedAlgorithm, mismatch_metrics, resolve_algorithm
from trainer.batch import collate, token_advantages
from trainer.checkpoint import TrainState, latest_checkpoint, load_weights
from trainer.config import TrainConfig
from trainer.envs.base import Environment
from trainer.evaluate import due as evaluation_due
from trainer.evaluate import evaluate
from trainer.events import NullSink, Sink
from trainer.fsdp import gathered as unsharded
from trainer.fsdp import shard
from trainer.kl_control import kl_in_reward, kl_step
from trainer.metrics import step_metrics
from trainer.policy import Policy
from trainer.records import alert_event
from trainer.run_state import (
    freeze_long_lived,
    load_state,
    reference_copy,
    reference_policy,
    save_state,
)
from trainer.sampled import Sampled
from trainer.sampling import sample
from trainer.step_records import (
    build_records,
    evidence_info,
    recorded_groups,
    row_means,
    takes_trajectories,
    token_rows,
    token_summaries,
)
from trainer.update import on_policy, optimise, score
from trainer.warmstart import warmstart

if TYPE_CHECKING:
    from trainer.distributed import Parallel


@dataclass
class TrainResult:
    status: str  # "succeeded" | "cancelled" | "failed"
    last_step: int
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def train(
    config: TrainConfig,
    env: Environment,
    reward_fn: RewardFn,
    sink: Sink | None = None,
    *,
    monitor: Monitor | None = None,
    should_stop: Callable[[], bool] | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = True,
    init_checkpoint: str | Path | None = None,
    parallel: Parallel | None = None,
) -> TrainResult:
    """Train ``config.steps`` steps (continuing from the newest checkpoint in
    ``checkpoint_dir`` when ``resume``; else starting from the weights of
    ``init_checkpoint`` when given). ``should_stop`` is checked before every step:
    a True stops the run cleanly with status ``cancelled``.

    ``parallel``: this process's rank in a run of several (``trainer.distributed``);
    every rank calls ``train``, rank 0's ``sink`` receives the run's events (the
    others' is not written to), its ``should_stop`` decides for all."""
    sink = sink or NullSink()
    par = parallel if parallel is not None and parallel.world > 1 else None
    world = 1 if par is None else par.world
    if config.resources.processes != world:
        raise ValueError(
            f"resources.processes: the config asks for {config.resources.processes} "
            f"processes, this trainer runs as {world} (launch it with python -m "
            f"trainer run --nproc-per-node {config.resources.processes})"
        )
    algo = resolve_algorithm(config.algorithm)
    torch.manual_seed(config.seed)
    policy = Policy.build(
        config.model,
        env.vocabulary(),
        with_value_head=algo.needs_value_head,
        max_positions=max(2048, config.rollout.max_total_tokens + 8),
        temperature=config.rollout.temperature,
    )
    ckpt = latest_checkpoint(checkpoint_dir) if resume else None
    if ckpt is None and init_checkpoint is not None:
        load_weights(init_checkpoint, policy=policy)
    # fsdp: the KL reference stays whole; its copy is taken before sharding.
    whole_ref = reference_copy(policy, algo, par)
    if par is not None:  # fsdp: parameters become DTensors, before the optimizer
        shard(policy, par)
    optimizer = torch.optim.AdamW(
        [p for p in policy.parameters() if p.requires_grad],  # LoRA: adapters only
        lr=config.optim.lr,
        betas=(config.optim.beta1, config.optim.beta2),
        weight_decay=config.optim.weight_decay,
    )
    state = TrainState(
        step=0,
        task_rng=random.Random(config.seed),  # alike on every rank: see my_tasks
        sample_gen=torch.Generator().manual_seed(
            config.seed if par is None else par.sample_seed(config.seed)
        ),
    )
    if ckpt is not None:
        state = load_state(ckpt, policy, optimizer, par)
    if par is not None:
        # Records are built on every rank when rank 0's sink listens.
        par.listening = par.broadcast(not isinstance(sink, NullSink))
    sink.emit(
        {
            "type": "run_started",
            "config": config.model_dump(mode="json"),
            "start_step": state.step + 1,
            "num_params": policy.num_params(),
            "device": str(policy.device),
        }
    )
    # The warm start's last loss is logged with step 1 (charts start at step 1).
    warm: dict[str, float] = {}
    if ckpt is None and init_checkpoint is None and config.model.warmstart_steps:
        stop_warm = should_stop
        if par is not None:  # every rank stops at the same warm-start step
            stop_warm = lambda: par.broadcast(  # noqa: E731
                should_stop is not None and should_stop()
            )
        loss = warmstart(policy, env, config, stop_warm)
        if loss is None:  # cancelled (or interrupted) during the warm start
            sink.emit(
                {
                    "type": "run_finished",
                    "status": "cancelled",
                    "step": 0,
                    "error": None,
                }
            )
            return TrainResult("cancelled", 0, {})
        warm["warmstart/loss"] = loss
    ref = reference_policy(policy, algo, checkpoint_dir, par, whole=whole_ref)
    if par is not None:
        par.wrap(policy)
    step = state.step
    metrics: dict[str, float] = {}
    frozen = freeze_long_lived()
    try:
        for step in range(state.step + 1, config.steps + 1):
            stop = should_stop is not None and should_stop()
            if par is not None:
                stop = par.broadcast(stop)
            if stop:
                sink.emit(
                    {
                        "type": "run_finished",
                        "status": "cancelled",
                        "step": step - 1,
                        "error": None,
                    }
                )
                return TrainResult("cancelled", step - 1, metrics)
            metrics = _train_step(
                step,
                config,
                algo,
                env,
                reward_fn,
                policy,
                ref,
                optimizer,
                state,
                sink,
                monitor,
                extra=warm if step == 1 else None,
                par=par,
            )
            state.step = step
            every = config.checkpoint.every
            if (
                checkpoint_dir is not None
                and every
                and (step % every == 0 or step == config.steps)
            ):
                path = save_state(checkpoint_dir, policy, optimizer, state, config, par)
                sink.emit({"type": "checkpoint", "step": step, "path": str(path)})
    except Exception as exc:
        sink.emit(
            {
                "type": "run_finished",
                "status": "failed",
                "step": step,
                "error": f"{type(exc).__name__}: {exc}",
            }
        )
        raise
    finally:
        if frozen:
            gc.unfreeze()
    sink.emit(
        {
            "type": "run_finished",
            "status": "succeeded",
            "step": config.steps,
            "error": None,
        }
    )
    return TrainResult("succeeded", config.steps, metrics)


def _train_step(
    step: int,
    config: TrainConfig,
    algo: ResolvedAlgorithm,
    env: Environment,
    reward_fn: RewardFn,
    policy: Policy,
    ref: Policy | None,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    sink: Sink,
    monitor: Monitor | None,
    extra: dict[str, float] | None = None,
    par: Parallel | None = None,
) -> dict[str, float]:
    """One step. With ``par`` (several processes) this rank trains on its share; the
    metrics, the detectors and the recording policy see the whole step on rank 0."""
    t_start = time.perf_counter()
    # Records are costly: skip them unheard.
    capture = not isinstance(sink, NullSink) if par is None else par.listening
    with unsharded(policy, par):  # fsdp: each rank generates alone
        sampled = sample(step, config, algo, env, reward_fn, policy, state, par)
    kept_idx = [i for i, k in enumerate(sampled.kept) if k]
    kept = [sampled.rollouts[i] for i in kept_idx]
    kept_results = [sampled.results[i] for i in kept_idx]
    t_update = time.perf_counter()
    upd: dict[str, float] = {}
    arrays: list[dict[str, list[float]] | None] = [None] * len(sampled.rollouts)
    per_traj_adv = [0.0] * len(sampled.rollouts)
    row_entropy: list[float] = []  # per kept rollout: mean over its trained tokens
    # Several processes update together or not at all: a rank whose groups were all
    # dropped takes part with its rollouts and nothing trained (a zero gradient).
    update = bool(kept) if par is None else par.any(bool(kept))
    if update:
        rows, row_results = (
            (kept, kept_results)
            if kept
            else (
                sampled.rollouts,
                sampled.results,
            )
        )
        batch = collate(rows, policy.pad_id, policy.device)
        if not kept:
            batch.loss_mask.zero_()
        if algo.mask_truncated:  # DAPO's overlong filtering: no gradient from them
            batch.loss_mask[[j for j, ro in enumerate(kept) if ro.truncated]] = 0.0
        policy_pass = not on_policy(algo, config.optim)
        with unsharded(policy, par if policy_pass else None):
            scores = score(policy, ref, batch, policy_pass=policy_pass)
        kl_reward, kept_results = kl_in_reward(
            algo, state, batch, scores, row_results, par
        )
        adv, returns, traj_adv = token_advantages(
            algo, batch, kept_results, config.rollout.group_size, scores.values, par
        )
        upd, new_lp = optimise(
            policy,
            optimizer,
            algo,
            config.optim,
            batch,
            scores,
            adv,
            returns,
            max_len=config.rollout.max_total_tokens,
            generator=state.sample_gen,
            par=par,
        )
        upd.update(token_summaries(batch.loss_mask, adv, scores.entropy))
        if kept:
            row_entropy = row_means(scores.entropy, batch.loss_mask)
        mismatch = {}
        if batch.sampler_logprobs is not None:
            mismatch = mismatch_metrics(
                scores.old_logprobs, batch.sampler_logprobs, batch.loss_mask
            )
        if par is not None:  # the whole batch's numbers, before the KL controller
            trained = float(batch.loss_mask.sum())
            upd = par.reduce_metrics(upd, trained)
            mismatch = par.reduce_metrics(mismatch, trained) if mismatch else {}
        upd.update(kl_step(algo, state, scores, upd.get("kl", kl_reward)))
        upd.update(mismatch)
        for j, i in enumerate(kept_idx):
            per_traj_adv[i] = float(traj_adv[j])
    else:  # every group dropped: no update, but the policy's entropy is still news
        batch = collate(sampled.rollouts, policy.pad_id, policy.device)
        with unsharded(policy, par):
            ent = score(policy, None, batch).entropy
        sel = batch.loss_mask > 0
        upd["entropy"] = float(ent[sel].mean()) if bool(sel.any()) else float("nan")
        if par is not None:
            upd = par.reduce_metrics(upd, float(sel.sum()))
    t_end = time.perf_counter()
    timing = {
        "gen": sampled.gen_s,
        "reward": sampled.reward_s,
        "update": t_end - t_update,
        "step": t_end - t_start,
    }
    sampled.row_entropy = [None] * len(sampled.rollouts)
    for j, i in enumerate(kept_idx[: len(row_entropy)]):
        sampled.row_entropy[i] = row_entropy[j]
    # Several processes: rank 0 sees the whole step (``whole``), the others nothing.
    whole: Sampled | None = sampled
    if par is not None:
        from trainer.distributed import merge_sampled

        parts = par.gather(sampled)
        whole = merge_sampled(parts) if parts is not None else None
    evaluation: dict[str, float] = {}
    if evaluation_due(config, step):  # the policy after this step's update
        with unsharded(policy, par):  # fsdp: every rank gathers, rank 0 plays
            if whole is not None:
                evaluation = evaluate(policy, env, reward_fn, config, step)
    metrics: dict[str, float] = {}
    alerts = []
    if whole is not None:
        metrics = step_metrics(config, whole, upd, timing)
        metrics.update(extra or {})
        metrics.update(evaluation)
        if monitor is not None:  # before the records: an alert's groups are recorded
            episodes = [r.episode for r in whole.rollouts]
            if takes_trajectories(monitor):
                info = evidence_info(whole)
                alerts = monitor(
                    step, metrics, episodes, whole.results, trajectories=info
                )
            else:  # a monitor written before alerts named their trajectories
                alerts = monitor(step, metrics, episodes, whole.results)
    records: list[dict[str, Any]] = []
    if capture:  # built before the step event so that it can say what they cost
        t_records = time.perf_counter()
        if par is None:
            chosen = recorded_groups(config, step, sampled, alerts)
        else:
            mine = recorded_groups(config, step, whole, alerts) if par.main else None
            chosen = par.broadcast(mine)
        if kept and chosen.token_arrays and chosen.groups:
            rows = token_rows(
                batch.attention_mask,
                batch.loss_mask,
                new_lp,
                scores.old_logprobs,
                scores.entropy,
                adv,
            )
            for j, i in enumerate(kept_idx):
                arrays[i] = rows[j]
        records = build_records(step, sampled, arrays, per_traj_adv, policy, chosen)
        if par is not None:  # every rank's records, each once, on rank 0
            gathered = par.gather(records)
            records = [r for part in gathered or [] for r in part]
        metrics["timing_s/records"] = time.perf_counter() - t_records
    if whole is None:  # a rank other than 0: rank 0 speaks for the step
        return metrics
    sink.emit({"type": "step", "step": step, "metrics": metrics})
    for event in records:
        sink.emit(event)
    for alert in alerts:
        sink.emit(alert_event(alert))
    return metrics
