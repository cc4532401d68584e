"""The training loop: rollout -> rewards -> advantages -> loss -> optimiser step -> events.

``train(config, env, reward_fn, sink)`` is the whole trainer. It knows nothing of Django,
Celery or how rewards are computed: the reward function and the detector monitor are
callables handed in (``trainer.runner`` wires the ones from ``rewards``). Every step
emits a ``step`` event with TRL/verl-named metrics and one ``trajectory`` event per
rollout with per-token arrays; see ``trainer.events`` for the shapes.
"""

from __future__ import annotations

import gc
import inspect
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rewards.types import Monitor, RewardFn, RewardResult, TrajectoryInfo
from trainer.algorithms import (
    ResolvedAlgorithm,
    adaptive_kl_coef,
    masked_mean,
    mismatch_metrics,
    resolve_algorithm,
    zero_variance_groups,
)
from trainer.batch import Batch, collate, token_advantages, with_kl_penalty
from trainer.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from trainer.config import TrainConfig
from trainer.envs.base import Environment
from trainer.evaluate import due as evaluation_due
from trainer.evaluate import evaluate
from trainer.events import NullSink, Sink
from trainer.metrics import step_metrics
from trainer.policy import AdaptersOff, Policy
from trainer.recording import Selection, alerted_groups, select
from trainer.records import (
    alert_event,
    critical_path_event,
    judgement_events,
    trajectory_event,
)
from trainer.rollout import play
from trainer.sampled import Sampled
from trainer.update import Scores, on_policy, optimise, score, token_kl
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
    ckpt = latest_checkpoint(checkpoint_dir) if resume else None
    if ckpt is not None:
        state = _load(ckpt, policy, optimizer, par)
    elif init_checkpoint is not None:
        load_weights(init_checkpoint, policy=policy)
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
    ref = _reference(policy, algo, checkpoint_dir, par)
    if par is not None:
        par.wrap(policy)
    step = state.step
    metrics: dict[str, float] = {}
    frozen = _freeze_long_lived()
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
                path = _save(checkpoint_dir, policy, optimizer, state, config, par)
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


def _load(
    path: Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    par: Parallel | None,
) -> TrainState:
    from trainer.dist_checkpoint import is_sharded, load_sharded

    if par is None and not is_sharded(path):
        return load_checkpoint(path, policy=policy, optimizer=optimizer)
    return load_sharded(path, policy=policy, optimizer=optimizer, par=par)


def _save(
    root: str | Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    config: TrainConfig,
    par: Parallel | None,
) -> Path:
    meta = {"config": config.model_dump(mode="json")}
    keep = config.checkpoint.keep
    if par is None:
        return save_checkpoint(
            root, policy=policy, optimizer=optimizer, state=state, meta=meta, keep=keep
        )
    from trainer.dist_checkpoint import save_sharded

    return save_sharded(
        root,
        policy=policy,
        optimizer=optimizer,
        state=state,
        meta=meta,
        keep=keep,
        par=par,
    )


def _freeze_long_lived() -> bool:
    """Move what is alive when the step loop starts (imported modules, the model, the
    environment's corpus: hundreds of thousands of objects that live as long as the
    run) out of the cyclic collector's reach, so that each full collection scans only
    what the steps allocate. On a 2-core machine a full collection over them took
    0.2-0.5 s, and the records of a step trigger some. Skipped if the host process
    froze objects itself; undone when the run ends."""
    if gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True


def _reference(
    policy: Policy,
    algo: ResolvedAlgorithm,
    checkpoint_dir: str | Path | None,
    par: Parallel | None = None,
) -> Policy | AdaptersOff | None:
    """The frozen KL reference is the policy as RL began (after any warm start); it is
    saved once beside the checkpoints so a resumed run compares against the same one
    (by rank 0; every rank holds the same one)."""
    if algo.kl_beta <= 0:
        return None
    if policy.lora:  # the base model, adapters off: no copy, nothing to save
        return policy.adapters_off()
    from safetensors.torch import load_model, save_model

    ref = policy.frozen_copy()
    if checkpoint_dir is not None:
        path = Path(checkpoint_dir) / "reference.safetensors"
        exists = path.exists()
        if par is not None:
            par.barrier()  # every rank has looked before rank 0 writes it
        if exists:
            load_model(ref, str(path), strict=False)
        elif par is None or par.main:
            path.parent.mkdir(parents=True, exist_ok=True)
            save_model(ref, str(path))
    return ref


def sample(
    step: int,
    config: TrainConfig,
    algo: ResolvedAlgorithm,
    env: Environment,
    reward_fn: RewardFn,
    policy: Policy,
    state: TrainState,
    par: Parallel | None = None,
) -> Sampled:
    """Roll out and score. DAPO's dynamic sampling (arXiv 2503.14476 §3.2): groups whose
    rewards are all equal carry no gradient, so they are dropped and new tasks sampled
    until the batch holds ``tasks_per_step`` groups or the round cap is hit.

    With ``par`` this rank plays its share of the step's tasks (and of each
    resampling round's), numbered after the lower ranks' groups."""
    G = config.rollout.group_size
    need = (
        config.rollout.tasks_per_step
        if par is None
        else par.share(config.rollout.tasks_per_step)
    )
    out = Sampled([], [], [], 0)
    rounds = 1 + (
        algo.max_resample_rounds if algo.group_filter == "drop_zero_variance" else 0
    )
    kept_groups = 0
    for _ in range(rounds):
        if par is None:
            tasks = env.sample_tasks(need - kept_groups, state.task_rng)
        else:  # every rank takes part in every round, if only to draw in step
            mine = par.my_tasks(env, need - kept_groups, state.task_rng)
            if mine is None:
                break
            if not mine:
                continue
            tasks = mine
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
        if par is None and kept_groups >= need:
            break
    if par is not None:
        offset = par.group_offset(len(out.rollouts) // G)
        for ro in out.rollouts:
            ro.group += offset
    return out


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
        scores = score(
            policy, ref, batch, policy_pass=not on_policy(algo, config.optim)
        )
        kl_reward, kept_results = _kl_in_reward(
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
        upd.update(_token_summaries(batch.loss_mask, adv, scores.entropy))
        if kept:
            row_entropy = _row_means(scores.entropy, batch.loss_mask)
        mismatch = {}
        if batch.sampler_logprobs is not None:
            mismatch = mismatch_metrics(
                scores.old_logprobs, batch.sampler_logprobs, batch.loss_mask
            )
        if par is not None:  # the whole batch's numbers, before the KL controller
            trained = float(batch.loss_mask.sum())
            upd = par.reduce_metrics(upd, trained)
            mismatch = par.reduce_metrics(mismatch, trained) if mismatch else {}
        upd.update(_kl_step(algo, state, scores, upd.get("kl", kl_reward)))
        upd.update(mismatch)
        for j, i in enumerate(kept_idx):
            per_traj_adv[i] = float(traj_adv[j])
    else:  # every group dropped: no update, but the policy's entropy is still news
        batch = collate(sampled.rollouts, policy.pad_id, policy.device)
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
    metrics: dict[str, float] = {}
    alerts = []
    if whole is not None:
        metrics = step_metrics(config, whole, upd, timing)
        metrics.update(extra or {})
        if evaluation_due(config, step):  # the policy after this step's update
            metrics.update(evaluate(policy, env, reward_fn, config, step))
        if monitor is not None:  # before the records: an alert's groups are recorded
            episodes = [r.episode for r in whole.rollouts]
            if _takes_trajectories(monitor):
                info = _evidence_info(whole)
                alerts = monitor(
                    step, metrics, episodes, whole.results, trajectories=info
                )
            else:  # a monitor written before alerts named their trajectories
                alerts = monitor(step, metrics, episodes, whole.results)
    records: list[dict[str, Any]] = []
    if capture:  # built before the step event so that it can say what they cost
        t_records = time.perf_counter()
        if par is None:
            chosen = _recorded(config, step, sampled, alerts)
        else:
            mine = _recorded(config, step, whole, alerts) if par.main else None
            chosen = par.broadcast(mine)
        if kept and chosen.token_arrays and chosen.groups:
            rows = _rows(
                batch.attention_mask,
                batch.loss_mask,
                new_lp,
                scores.old_logprobs,
                scores.entropy,
                adv,
            )
            for j, i in enumerate(kept_idx):
                arrays[i] = rows[j]
        records = _records(step, sampled, arrays, per_traj_adv, policy, chosen)
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


def _kl_in_reward(
    algo: ResolvedAlgorithm,
    state: TrainState,
    batch: Batch,
    scores: Scores,
    results: list[RewardResult],
    par: Parallel | None = None,
) -> tuple[float | None, list[RewardResult]]:
    """Set this step's KL coefficient on ``scores``; with ``kl_in_reward`` subtract
    coef * KL from the rewards (the advantages see it, the logged reward does not).
    Returns the mean per-token KL when it was measured here (over every rank's
    tokens), and the results."""
    scores.kl_beta = algo.kl_beta if state.kl_coef is None else state.kl_coef
    if not algo.kl_in_reward or scores.ref_logprobs is None:
        return None, results
    kl = token_kl(algo, scores.old_logprobs, scores.ref_logprobs, batch.loss_mask)
    if par is None:
        mean = float(masked_mean(kl, batch.loss_mask))
    else:
        keep = batch.loss_mask > 0
        total, count = par.all_sum([float(kl[keep].sum()), float(keep.sum())])
        mean = total / max(count, 1.0)
    return mean, with_kl_penalty(results, kl, batch, scores.kl_beta)


def _kl_step(
    algo: ResolvedAlgorithm, state: TrainState, scores: Scores, kl: float | None
) -> dict[str, float]:
    """The KL metrics, and the adaptive coefficient's move towards its target."""
    if scores.ref_logprobs is None or kl is None:
        return {}
    out = {"kl": kl, "kl/coef": scores.kl_beta}
    if algo.kl_target > 0:
        state.kl_coef = adaptive_kl_coef(
            scores.kl_beta, kl, target=algo.kl_target, horizon=algo.kl_horizon
        )
    return out


def _token_summaries(
    mask: torch.Tensor, adv: torch.Tensor, entropy: torch.Tensor
) -> dict[str, float]:
    sel = mask > 0
    if not bool(sel.any()):
        return {}
    a = adv[sel]
    return {
        "advantages/mean": float(a.mean()),
        "advantages/min": float(a.min()),
        "advantages/max": float(a.max()),
        "entropy": float(entropy[sel].mean()),
    }


def _row_means(values: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Per row, the mean of ``values`` (B, T) over its trained tokens (NaN: none)."""
    m = (mask > 0).to(values.dtype)
    n = m.sum(1)
    means = (values.detach() * m).sum(1) / n.clamp(min=1)
    means[n == 0] = float("nan")
    return means.float().cpu().tolist()


def _takes_trajectories(monitor: Monitor) -> bool:
    try:
        params = inspect.signature(monitor).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "trajectories" or p.kind is p.VAR_KEYWORD for p in params)


def _evidence_info(sampled: Sampled) -> list[TrajectoryInfo]:
    """Where each rollout is stored and what the detectors' evidence reads of it
    beyond its reward metrics (``rewards.evidence``)."""
    entropy = sampled.row_entropy
    out = []
    for i, ro in enumerate(sampled.rollouts):
        stats = {"length": float(ro.action_tokens)}
        if i < len(entropy) and entropy[i] is not None:
            stats["entropy"] = entropy[i]
        out.append(TrajectoryInfo(ro.group, ro.index, ro.task.id, stats))
    return out


def _rows(
    attn, loss_mask, new_lp, old_lp, entropy, adv
) -> list[dict[str, list[float | None]]]:
    """Per-row Python lists (one conversion per batch), cut to each row's length.

    The learner scores a row from its first trained token on (see
    ``Policy.token_stats``); the model's numbers for the context before it do not
    exist and are None. Advantages exist everywhere (0 on context)."""
    lengths = (attn.sum(1) - 1).tolist()
    trained = loss_mask > 0
    firsts = [
        int(f) if has else n
        for f, has, n in zip(
            trained.float().argmax(1).tolist(),
            trained.any(1).tolist(),
            lengths,
            strict=True,
        )
    ]
    ratio = torch.exp(new_lp - old_lp)
    scored = {
        "logprob": new_lp.float().cpu().tolist(),
        "old_logprob": old_lp.float().cpu().tolist(),
        "ratio": ratio.float().cpu().tolist(),
        "entropy": entropy.float().cpu().tolist(),
    }
    advantage = adv.float().cpu().tolist()
    rows = []
    for b, (n, f) in enumerate(zip(lengths, firsts, strict=True)):
        row: dict[str, list[float | None]] = {
            k: [None] * f + v[b][f:n] for k, v in scored.items()
        }
        row["advantage"] = advantage[b][:n]
        rows.append(row)
    return rows


def _recorded(
    config: TrainConfig, step: int, sampled: Sampled, alerts: list[Any]
) -> Selection:
    """The recording policy's choice of this step's groups (``trainer.recording``)."""
    rewards: dict[int, list[float | None]] = {}
    for ro, res in zip(sampled.rollouts, sampled.results, strict=True):
        rewards.setdefault(ro.group, []).append(float(res.breakdown.total))
    alerted = alerted_groups(a.evidence for a in alerts)
    alerted.update(t.group for a in alerts for t in a.trajectories)
    return select(config.record, step, rewards, alerted, config.seed)


def _records(
    step, sampled: Sampled, arrays, per_traj_adv, policy: Policy, chosen: Selection
) -> list[dict[str, Any]]:
    """Every recorded rollout's trajectory event, then its judgements and critical
    path (rollouts of groups the recording policy leaves out are never built)."""
    out: list[dict[str, Any]] = []
    picked = [i for i, ro in enumerate(sampled.rollouts) if ro.group in chosen.groups]
    # Every segment of the step decoded in one call.
    texts = iter(
        policy.decode_many(
            [seg.token_ids for i in picked for seg in sampled.rollouts[i].segments]
        )
    )
    for i in picked:
        ro, res = sampled.rollouts[i], sampled.results[i]
        out.append(
            trajectory_event(
                step,
                ro,
                res,
                dropped=not sampled.kept[i],
                advantage=per_traj_adv[i],
                tokens=policy.tokens(ro.token_ids) if chosen.token_arrays else [],
                texts=[next(texts) for _ in ro.segments],
                arrays=arrays[i],
                token_arrays=chosen.token_arrays,
            )
        )
        out.extend(judgement_events(step, ro, res))
        cp = critical_path_event(step, ro, res)
        if cp is not None:
            out.append(cp)
    return out
