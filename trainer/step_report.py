"""What a step reports beyond its metrics: the token summaries, the per-token rows
of the recorded rollouts, the recording policy's choice and the trajectory events
(with their judgements and critical paths), and what the detectors' evidence reads.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from rewards.evidence import mark_equal_groups
from rewards.types import Monitor, TrajectoryInfo
from trainer.config import TrainConfig
from trainer.policy import Policy
from trainer.recording_policy import Selection, alerted_groups, select
from trainer.sampled import Sampled
from trainer.trajectory_events import (
    critical_path_event,
    judgement_events,
    trajectory_event,
)
from trainer.update import MASK_REASONS


def token_summaries(
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


def row_means(values: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Per row, the mean of ``values`` (B, T) over its trained tokens (NaN: none)."""
    m = (mask > 0).to(values.dtype)
    n = m.sum(1)
    means = (values.detach() * m).sum(1) / n.clamp(min=1)
    means[n == 0] = float("nan")
    return means.float().cpu().tolist()


def takes_trajectories(monitor: Monitor) -> bool:
    try:
        params = inspect.signature(monitor).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "trajectories" or p.kind is p.VAR_KEYWORD for p in params)


def evidence_info(sampled: Sampled) -> list[TrajectoryInfo]:
    """Where each rollout is stored and what the detectors' evidence reads of it
    beyond its reward metrics (``rewards.evidence``)."""
    entropy = sampled.row_entropy
    rows = []
    for i, ro in enumerate(sampled.rollouts):
        stats = {"length": float(ro.action_tokens)}
        stats["reward"] = float(sampled.results[i].breakdown.total)
        if i < len(entropy) and entropy[i] is not None:
            stats["entropy"] = entropy[i]
        rows.append(stats)
    mark_equal_groups(rows, [ro.group for ro in sampled.rollouts])
    return [
        TrajectoryInfo(ro.group, ro.index, ro.task.id, stats)
        for ro, stats in zip(sampled.rollouts, rows, strict=True)
    ]


def token_rows(
    attn, loss_mask, new_lp, old_lp, entropy, adv, token_masks=None
) -> list[dict[str, list[float | None]]]:
    """Per-row Python lists (one conversion per batch), cut to each row's length.

    The learner scores a row from its first trained token on (see
    ``Policy.token_stats``); the model's numbers for the context before it do not
    exist and are None. Advantages exist everywhere (0 on context).
    ``token_masks`` (B, T-1) int: why the update left a trained token out
    (``trainer.update.MASK_REASONS``); a row gets ``masked``: [[target, reason]]."""
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
    if token_masks is not None:
        for b, t in (token_masks > 0).nonzero().tolist():
            if t < lengths[b]:
                reason = MASK_REASONS[int(token_masks[b, t])]
                rows[b].setdefault("masked", []).append([t, reason])
    return rows


def recorded_groups(
    config: TrainConfig, step: int, sampled: Sampled, alerts: list[Any]
) -> Selection:
    """The recording policy's choice of this step's groups (``trainer.recording_policy``)."""
    rewards: dict[int, list[float | None]] = {}
    for ro, res in zip(sampled.rollouts, sampled.results, strict=True):
        rewards.setdefault(ro.group, []).append(float(res.breakdown.total))
    alerted = alerted_groups(a.evidence for a in alerts)
    alerted.update(t.group for a in alerts for t in a.trajectories)
    planned = config.rollout.tasks_per_step * config.rollout.group_size
    return select(config.record, step, rewards, alerted, config.seed, planned)


def build_records(
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
                tokens=policy.token_view(ro.token_ids) if chosen.token_arrays else None,
                texts=[next(texts) for _ in ro.segments],
                arrays=arrays[i],
            )
        )
        out.extend(judgement_events(step, ro, res))
        cp = critical_path_event(step, ro, res)
        if cp is not None:
            out.append(cp)
    return out
