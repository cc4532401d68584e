"""Rollouts -> padded tensors, and rewards -> per-token advantages.

Targets are ``input_ids[:, 1:]``, so every per-token tensor here is (B, T-1): position
``t`` scores token ``t + 1``. ``loss_mask`` is 1 on the policy's own action tokens only;
prompt, tool and sub-agent tokens are context, never trained on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from rewards.types import RewardBreakdown, RewardResult
from trainer.algorithms import (
    ResolvedAlgorithm,
    gae_advantages,
    group_advantages,
    process_advantages,
)
from trainer.rollout import Rollout
from trainer.rows import Prefixes, left_pad

if TYPE_CHECKING:
    from trainer.single import Handle


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T) right-padded
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T-1) float, 1 = trained token
    step_of: torch.Tensor  # (B, T-1) agent step of each target token, -1 for prompt/pad
    prefixes: Prefixes | None = None  # None: no row shares its prompt with another
    # (B, T-1) the sampler's log-prob of each target token, NaN where it gave none
    # (context tokens, scripted actions); None: no rollout carried any.
    sampler_logprobs: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def first_trained(self) -> int:
        """The first target index any row trains on (0 if none): scoring can start
        there, since everything before it is context in every row."""
        cols = self.loss_mask.any(0).nonzero()
        return int(cols[0]) if len(cols) else 0

    def select(self, idx: torch.Tensor) -> Batch:
        return Batch(
            *(
                t[idx]
                for t in (
                    self.input_ids,
                    self.attention_mask,
                    self.loss_mask,
                    self.step_of,
                )
            ),
            prefixes=None if self.prefixes is None else self.prefixes.select(idx),
            sampler_logprobs=None
            if self.sampler_logprobs is None
            else self.sampler_logprobs[idx],
        )


def collate(rollouts: Sequence[Rollout], pad_id: int, device: torch.device) -> Batch:
    width = max(len(r.token_ids) for r in rollouts)
    B = len(rollouts)
    ids = torch.full((B, width), pad_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    train = torch.zeros((B, width), dtype=torch.float32)
    step = torch.full((B, width), -1, dtype=torch.long)
    sampled = torch.full((B, width), math.nan, dtype=torch.float32)
    any_sampled = False
    for b, ro in enumerate(rollouts):
        pos = 0
        for seg in ro.segments:
            n = len(seg.token_ids)
            ids[b, pos : pos + n] = torch.tensor(seg.token_ids, dtype=torch.long)
            attn[b, pos : pos + n] = 1
            if seg.mask is None:
                train[b, pos : pos + n] = 1.0
            if seg.kind != "prompt":
                step[b, pos : pos + n] = seg.turn
            if seg.logprobs is not None and len(seg.logprobs) == n:
                sampled[b, pos : pos + n] = torch.tensor(seg.logprobs)
                any_sampled = True
            pos += n
    return Batch(
        input_ids=ids.to(device),
        attention_mask=attn.to(device),
        loss_mask=train[:, 1:].to(device),
        step_of=step[:, 1:].to(device),
        prefixes=_prefixes(rollouts, pad_id, device),
        sampler_logprobs=sampled[:, 1:].to(device) if any_sampled else None,
    )


def _prefixes(
    rollouts: Sequence[Rollout], pad_id: int, device: torch.device
) -> Prefixes | None:
    table: dict[tuple[int, ...], int] = {}
    of_row = []
    for ro in rollouts:
        first = ro.segments[0] if ro.segments else None
        if first is None or first.kind != "prompt" or not first.token_ids:
            return None
        of_row.append(table.setdefault(tuple(first.token_ids), len(table)))
    if len(table) == len(rollouts):
        return None
    ids, mask = left_pad(list(table), pad_id, device)  # dicts keep insertion order
    lengths = [len(ro.segments[0].token_ids) for ro in rollouts]
    return Prefixes(
        ids=ids,
        mask=mask,
        of_row=torch.tensor(of_row, dtype=torch.long, device=device),
        length=torch.tensor(lengths, dtype=torch.long, device=device),
    )


def step_totals(result: RewardResult) -> list[float]:
    """The reward each agent step earned, summed over components."""
    per_step = list(result.breakdown.per_step.values())
    if not per_step:
        return [result.breakdown.total]
    return [float(sum(vals)) for vals in zip(*per_step, strict=True)]


def token_advantages(
    algo: ResolvedAlgorithm,
    batch: Batch,
    results: Sequence[RewardResult],
    group_size: int,
    values: torch.Tensor | None,
    par: Handle,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Per-token advantages (B, T-1), returns for the value head (or None), and one
    advantage per trajectory (B,) for display (its mean over trained tokens).

    What spans the batch is taken over every process's share (each holds whole
    groups): the ``"batch"`` std (``par.std_scaled``) and GAE's whitening."""
    mask = batch.loss_mask
    returns = None
    if algo.credit == "outcome":
        totals = torch.tensor([r.breakdown.total for r in results], dtype=torch.float32)
        per_traj = par.std_scaled(
            lambda scaling: group_advantages(
                totals, group_size, std_scaling=scaling, eps=algo.eps
            ),
            totals.tolist(),
            algo.std_scaling,
            algo.eps,
        ).to(mask.device)
        adv = per_traj.unsqueeze(1) * mask
        return adv, None, per_traj
    if algo.credit == "process":
        step_rewards = [step_totals(r) for r in results]
        adv = par.std_scaled(
            lambda scaling: _spread_steps(
                process_advantages(
                    step_rewards, group_size, std_scaling=scaling, eps=algo.eps
                ),
                batch,
            ),
            [x for s in step_rewards for x in s],
            algo.std_scaling,
            algo.eps,
        )
    else:  # "gae": a critic supplies the baseline, token by token
        if values is None:
            raise ValueError("credit 'gae' needs values from the value head")
        adv, returns = _gae(algo, batch, results, values, par)
    denom = mask.sum(1).clamp(min=1)
    per_traj = (adv * mask).sum(1) / denom
    return adv * mask, returns, per_traj


def _spread_steps(steps: list[list[float]], batch: Batch) -> torch.Tensor:
    B, T = batch.loss_mask.shape
    width = max(len(s) for s in steps) + 1
    table = torch.zeros((B, width))
    for b, s in enumerate(steps):
        table[b, : len(s)] = torch.tensor(s, dtype=torch.float32)
    idx = batch.step_of.cpu().clamp(min=0, max=width - 1)
    return table.gather(1, idx).to(batch.loss_mask.device)


def _gae(
    algo: ResolvedAlgorithm,
    batch: Batch,
    results: Sequence[RewardResult],
    values: torch.Tensor,
    par: Handle,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each trajectory's trained tokens in order; a step's reward arrives on
    its last action token and the episode is terminal (bootstrap value 0)."""
    adv = torch.zeros_like(batch.loss_mask)
    ret = torch.zeros_like(batch.loss_mask)
    mask_cpu = batch.loss_mask.cpu()
    step_cpu = batch.step_of.cpu()
    vals_cpu = values.detach().float().cpu()
    for b, res in enumerate(results):
        pos = mask_cpu[b].nonzero().flatten()
        if pos.numel() == 0:
            continue
        rewards = torch.zeros(pos.numel())
        totals = step_totals(res)
        steps_here = step_cpu[b, pos]
        for k in range(pos.numel()):
            last_of_step = k + 1 == pos.numel() or steps_here[k + 1] != steps_here[k]
            if last_of_step:
                s = int(steps_here[k])
                rewards[k] += totals[s] if s < len(totals) else 0.0
        # Rewards of steps the policy never acted in (none here) would be lost; the
        # final pseudo-step of a step-less episode lands on the last token.
        if len(totals) > int(steps_here.max()) + 1:
            rewards[-1] += sum(totals[int(steps_here.max()) + 1 :])
        v = torch.cat([vals_cpu[b, pos], torch.zeros(1)])
        a, r = gae_advantages(rewards, v, gamma=algo.gamma, lam=algo.lam)
        adv[b, pos.to(adv.device)] = a.to(adv.device)
        ret[b, pos.to(ret.device)] = r.to(ret.device)
    # PPO practice (CleanRL's norm_adv): whiten advantages over the batch's tokens
    # (every process's).
    return par.whiten(adv, batch.loss_mask, algo.eps), ret


def with_kl_penalty(
    results: Sequence[RewardResult], kl: torch.Tensor, batch: Batch, coef: float
) -> list[RewardResult]:
    """Results with a ``kl_penalty`` component of ``-coef * KL`` (verl's
    ``use_kl_in_reward``): each step pays for the KL of its own tokens, so outcome,
    process and GAE credit all see it. ``kl`` is (B, T-1), 0 on untrained tokens."""
    out = []
    sums = kl.detach().double().cpu()
    steps = batch.step_of.cpu()
    for b, res in enumerate(results):
        n = max(1, len(next(iter(res.breakdown.per_step.values()), (0.0,))))
        per_step = [0.0] * n
        for s in steps[b].unique().tolist():
            if s >= 0:
                per_step[min(s, n - 1)] -= coef * float(sums[b][steps[b] == s].sum())
        penalty = sum(per_step)
        breakdown = RewardBreakdown(
            total=res.breakdown.total + penalty,
            components={**res.breakdown.components, "kl_penalty": penalty},
            per_step={**res.breakdown.per_step, "kl_penalty": tuple(per_step)},
        )
        out.append(replace(res, breakdown=breakdown))
    return out
