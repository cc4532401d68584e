"""The training loop: build the run, then step it: rollout -> rewards -> advantages ->
loss -> optimiser step -> events (the step's stages are :mod:`trainer.step`).

``train(config, env, reward_fn, sink)`` is the whole trainer. It knows nothing of Django,
Celery or how rewards are computed: the reward function and the detector monitor are
callables handed in (``trainer.runner`` wires the ones from ``rewards``). Every step
emits a ``step`` event with TRL/verl-named metrics and one ``trajectory`` event per
rollout with per-token arrays; see ``trainer.events`` for the shapes. One process or
several, the loop is the same: its distributed handle is of world size one alone
(``trainer.single``).
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rewards.types import Monitor, RewardFn
from trainer.algorithms import resolve_algorithm
from trainer.checkpoint import TrainState, latest_checkpoint, load_weights
from trainer.config import TrainConfig
from trainer.distributed import Parallel
from trainer.envs.base import Environment
from trainer.events import NullSink, Sink
from trainer.fsdp import shard
from trainer.optimizer import build_optimizer
from trainer.policy import Policy
from trainer.run_state import (
    freeze_long_lived,
    load_state,
    reference_copy,
    reference_policy,
    save_state,
)
from trainer.single import Handle, Single, as_handle
from trainer.step import StepContext, train_step
from trainer.stopping import Every, Stopped
from trainer.warmstart import WARM_FILE, save_progress, warmstart


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
    parallel: Parallel | Single | None = None,
    save_on_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Train ``config.steps`` steps (continuing from the newest checkpoint in
    ``checkpoint_dir`` when ``resume``; else starting from the weights of
    ``init_checkpoint`` when given). ``should_stop`` is checked before every step
    and, alone, between generated tokens too (``trainer.stopping``): a True stops
    the run cleanly with status ``cancelled``. ``save_on_stop``, asked then: True
    when the run will resume (a pause, a shutdown), so that its state at the stop
    is checkpointed first (the last finished step's, or the warm start's progress)
    and the next attempt goes on from there, not from the last scheduled checkpoint.

    ``parallel``: this process's rank in a run of several (``trainer.distributed``);
    every rank calls ``train``, rank 0's ``sink`` receives the run's events (the
    others' is not written to), its ``should_stop`` decides for all. None (or a
    process group of one): this process trains alone."""
    sink = sink or NullSink()
    par = as_handle(parallel)
    _check_processes(config, par)
    algo = resolve_algorithm(config.algorithm)
    torch.manual_seed(config.seed)
    policy = Policy.build(
        config.model,
        env.vocabulary(),
        with_value_head=algo.needs_value_head,
        max_positions=max(2048, config.rollout.max_total_tokens + 8),
        temperature=config.rollout.temperature,
        fused_head=config.optim.fused_head,
    )
    policy.use_engine(config.rollout.engine)
    ckpt = latest_checkpoint(checkpoint_dir) if resume else None
    if ckpt is None and init_checkpoint is not None:
        load_weights(init_checkpoint, policy=policy)
    # fsdp: the KL reference stays whole; its copy is taken before sharding.
    whole_ref = reference_copy(policy, algo, par)
    shard(policy, par)  # fsdp: parameters become DTensors, before the optimizer
    optimizer = _optimizer(config, policy)
    state = TrainState(
        step=0,
        task_rng=random.Random(config.seed),  # alike on every rank: see my_tasks
        sample_gen=torch.Generator().manual_seed(par.sample_seed(config.seed)),
    )
    if ckpt is not None:
        state = load_state(ckpt, policy, optimizer, par)
        restore_monitor = getattr(monitor, "load_state_dict", None)
        if state.monitor and callable(restore_monitor):
            restore_monitor(state.monitor)
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
    warm: dict[str, float] = {}
    keep = _keeping(checkpoint_dir, par, save_on_stop)
    if ckpt is None and init_checkpoint is None and config.model.warmstart_steps:
        loss = _warm_start(policy, env, config, par, should_stop, sink, keep, resume)
        if loss is None:  # cancelled (or interrupted) during the warm start
            return _finished(sink, "cancelled", 0)
        warm["warmstart/loss"] = loss
    ref = reference_policy(policy, algo, checkpoint_dir, par, whole=whole_ref)
    par.wrap(policy)
    if should_stop is not None and par.world == 1:
        # Between tokens too; with several processes a rank cannot leave a step
        # alone (the others would wait in its collectives): per step only.
        policy.stop_check = Every(should_stop)
    ctx = StepContext(
        config, algo, env, reward_fn, policy, ref, optimizer, sink, monitor, par
    )
    return _run(ctx, state, warm, should_stop, checkpoint_dir, keep)


@dataclass
class _Keep:
    """Where a run that stops to resume keeps its state, and whether it does."""

    root: Path
    wanted: Callable[[], bool]  # asked at a stop: keep the state?
    warm: Path | None  # the warm start's progress (one process only)


def _keeping(
    checkpoint_dir: str | Path | None,
    par: Handle,
    save_on_stop: Callable[[], bool] | None,
) -> _Keep | None:
    if checkpoint_dir is None:
        return None
    warm = Path(checkpoint_dir) / WARM_FILE if par.world == 1 else None
    return _Keep(Path(checkpoint_dir), save_on_stop or (lambda: False), warm)


def _check_processes(config: TrainConfig, par: Handle) -> None:
    if config.resources.processes != par.world:
        raise ValueError(
            f"resources.processes: the config asks for {config.resources.processes} "
            f"processes, this trainer runs as {par.world} (launch it with python -m "
            f"trainer run --nproc-per-node {config.resources.processes})"
        )


def _optimizer(config: TrainConfig, policy: Policy) -> torch.optim.Optimizer:
    return build_optimizer(
        [p for p in policy.parameters() if p.requires_grad],  # LoRA: adapters only
        master_weights=config.optim.master_weights,
        lr=config.optim.lr,
        betas=(config.optim.beta1, config.optim.beta2),
        weight_decay=config.optim.weight_decay,
    )


def _warm_start(
    policy: Policy,
    env: Environment,
    config: TrainConfig,
    par: Handle,
    should_stop: Callable[[], bool] | None,
    sink: Sink,
    keep: _Keep | None,
    resume: bool,
) -> float | None:
    """The warm start's last loss (logged with step 1: charts start at step 1);
    None when it was cancelled. Every rank stops at the same warm-start step; its
    progress goes to the sink as ``warmstart`` events (rank 0's sink alone listens),
    and to ``keep`` when it stops to resume (one process)."""

    def stop() -> bool:
        return par.broadcast(should_stop is not None and should_stop())

    def progress(done: int, loss: float) -> None:
        of = config.model.warmstart_steps
        sink.emit({"type": "warmstart", "done": done, "of": of, "loss": loss})

    return warmstart(
        policy,
        env,
        config,
        stop,
        progress,
        keep=keep.warm if keep is not None else None,
        resume=resume,
        save_on_stop=keep.wanted if keep is not None else None,
    )


def _run(
    ctx: StepContext,
    state: TrainState,
    warm: dict[str, float],
    should_stop: Callable[[], bool] | None,
    checkpoint_dir: str | Path | None,
    keep: _Keep | None = None,
) -> TrainResult:
    """The steps, each checkpointed as configured, and the run's last event."""
    config, sink, par = ctx.config, ctx.sink, ctx.par
    step = saved = state.step
    metrics: dict[str, float] = {}
    frozen = freeze_long_lived()

    def stopped() -> TrainResult:
        if keep is not None and par.broadcast(keep.wanted()):
            _keep_state(ctx, state, keep, saved, warm.get("warmstart/loss"))
        return _finished(sink, "cancelled", state.step, metrics)

    try:
        for step in range(state.step + 1, config.steps + 1):
            if par.broadcast(should_stop is not None and should_stop()):
                return stopped()
            # A step stopped inside its rollout leaves the streams as they were.
            streams = state.task_rng.getstate(), state.sample_gen.get_state()
            weights = _versions(ctx.policy)
            metrics = train_step(ctx, state, step, warm if step == 1 else None)
            state.step = step
            every = config.checkpoint.every
            # The last step always: a run keeps its model even with every = 0.
            due = step == config.steps or (every > 0 and step % every == 0)
            if checkpoint_dir is not None and due:
                path = save_state(
                    checkpoint_dir,
                    ctx.policy,
                    ctx.optimizer,
                    state,
                    config,
                    par,
                    ctx.monitor,
                )
                sink.emit({"type": "checkpoint", "step": step, "path": str(path)})
                saved = step
    except Stopped:  # inside a step (generation): that step's work is dropped
        if _versions(ctx.policy) != weights:
            # Stopped past its update (an overdue cancel's, from outside): the
            # weights are no step's, nothing is kept.
            return _finished(sink, "cancelled", state.step, metrics)
        state.task_rng.setstate(streams[0])
        state.sample_gen.set_state(streams[1])
        return stopped()
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
    return _finished(sink, "succeeded", config.steps, metrics)


def _versions(policy: Policy) -> int:
    """Changes in place to the weights so far (an optimiser step adds to it)."""
    return sum(p._version for p in policy.parameters())


def _keep_state(
    ctx: StepContext, state: TrainState, keep: _Keep, saved: int, warm_loss
) -> None:
    """A run stopping to resume: a checkpoint of its last finished step (unless
    that step's was just written), or, before its first, the warm start's weights."""
    if state.step == 0:
        if keep.warm is not None and warm_loss is not None:
            cfg = ctx.config
            done = cfg.model.warmstart_steps
            save_progress(keep.warm, cfg, ctx.policy, done, warm_loss)
        return
    if state.step == saved:
        return
    path = save_state(
        keep.root, ctx.policy, ctx.optimizer, state, ctx.config, ctx.par, ctx.monitor
    )
    ctx.sink.emit({"type": "checkpoint", "step": state.step, "path": str(path)})


def _finished(
    sink: Sink, status: str, step: int, metrics: dict[str, float] | None = None
) -> TrainResult:
    sink.emit({"type": "run_finished", "status": status, "step": step, "error": None})
    return TrainResult(status, step, metrics or {})
