"""Advantage estimators: how a scalar or per-step reward becomes a learning signal.

* :func:`group_advantages`: GRPO's group-relative outcome advantage (arXiv 2402.03300
  §4.1.2), with the std division switchable: per group (GRPO), over the batch, or off
  (Dr. GRPO, arXiv 2503.20783, which shows the per-group std biases updates towards
  questions that are too easy or too hard).
* :func:`zero_variance_groups`: the groups whose rollouts all scored the same, which
  carry no gradient under any group-relative estimator (DAPO's dynamic sampling drops
  them, arXiv 2503.14476 §3.2).
* :func:`process_advantages`: GRPO's process-supervision variant (arXiv 2402.03300
  §4.1.3) for multi-step trajectories with one reward per step.
* :func:`gae_advantages`: generalised advantage estimation with a critic (Schulman et
  al. 2015, arXiv 1506.02438), for the PPO preset.

This module knows nothing of tokens, models, losses or presets: it maps rewards (and
values) to advantages. Advantages are targets, so nothing here is differentiated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

STD_SCALINGS = ("group", "batch", "none")


def _check_std_scaling(std_scaling: str) -> None:
    if std_scaling not in STD_SCALINGS:
        allowed = ", ".join(repr(s) for s in STD_SCALINGS)
        raise ValueError(f"std_scaling must be one of {allowed}, got {std_scaling!r}")


def _as_float_tensor(x: Tensor | Sequence[float]) -> Tensor:
    t = torch.as_tensor(x)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """Reshape rewards (B,) into (B // group_size, group_size), checking the layout."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B,), got shape {tuple(rewards.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(
            f"batch size {rewards.numel()} is not divisible by group_size {group_size}"
        )
    return rewards.view(-1, group_size)


def group_advantages(
    rewards: Tensor,
    group_size: int,
    *,
    std_scaling: str = "group",
    eps: float = 1e-4,
) -> Tensor:
    """Group-relative advantages (GRPO, arXiv 2402.03300 §4.1.2).

    Args:
        rewards: (B,) one scalar reward per rollout; consecutive runs of
            ``group_size`` rollouts answer the same prompt.
        group_size: G, rollouts per prompt (>= 2: the unbiased std needs two).
        std_scaling: ``"group"`` divide by (unbiased std of the group + eps), as GRPO;
            ``"batch"`` by (unbiased std of the whole batch + eps); ``"none"`` do not
            divide (Dr. GRPO, arXiv 2503.20783).
        eps: added to the std so a zero-variance group gives 0, not NaN.

    Returns:
        (B,) advantages ``R - mean(group)`` scaled as asked.
    """
    _check_std_scaling(std_scaling)
    if group_size < 2:
        raise ValueError(
            f"group_size must be >= 2 (the unbiased std of one reward is undefined), "
            f"got {group_size}"
        )
    rewards = _as_float_tensor(rewards).detach()
    grouped = _grouped(rewards, group_size)  # (B/G, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    # The float32 mean of equal rewards can miss them by an ulp (6e-8), which the
    # division by (std + eps) below would blow up to ~1e-3: equal rewards, no advantage.
    alike = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    centred = centred.masked_fill(alike, 0.0)
    if std_scaling == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif std_scaling == "batch":
        # One scale for the whole batch keeps the relative size of groups' signals
        # (a strongly separated group still outweighs a barely separated one).
        centred = centred / (rewards.std() + eps)
    return centred.reshape(-1)


def zero_variance_groups(
    rewards: Tensor, group_size: int, *, tol: float = 1e-6
) -> Tensor:
    """Which groups scored (nearly) identically across their rollouts.

    Args:
        rewards: (B,) as for :func:`group_advantages`.
        group_size: G.
        tol: a group whose ``max - min`` is at most ``tol`` counts as zero-variance.

    Returns:
        (B // G,) bool: True where every rollout of the group has the same reward, so
        the group-relative advantage is 0 for all of them (DAPO filters these out).
    """
    grouped = _grouped(_as_float_tensor(rewards).detach(), group_size)
    spread = grouped.amax(dim=1) - grouped.amin(dim=1)
    return spread <= tol


def gae_advantages(
    rewards: Tensor, values: Tensor, *, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (arXiv 1506.02438) over one trajectory.

    Args:
        rewards: (T,) reward after each step (leading batch dims ``(N, T)`` work too).
        values: (T+1,) critic values V(s_0..s_T). The last entry is the bootstrap
            value: 0 when the trajectory ended in a terminal state (no future reward
            to estimate), V(s_T) when it was truncated (the future is unknown, so the
            critic stands in for it).
        gamma: discount.
        lam: GAE's bias/variance knob: 0 gives the one-step TD error, 1 the Monte
            Carlo return minus the baseline.

    Returns:
        ``(advantages, returns)``, both (T,): ``A_t = sum_k (gamma lam)^k delta_{t+k}``
        with ``delta_t = r_t + gamma V_{t+1} - V_t``, and ``returns = A + V[:-1]``
        (the critic's regression target). Both are detached.
    """
    rewards = _as_float_tensor(rewards).detach()
    values = _as_float_tensor(values).detach().to(rewards.dtype)
    steps = rewards.shape[-1]
    if values.shape[:-1] != rewards.shape[:-1] or values.shape[-1] != steps + 1:
        raise ValueError(
            f"values must have shape (..., T+1) for rewards (..., T): got values "
            f"{tuple(values.shape)} for rewards {tuple(rewards.shape)}"
        )
    # All TD errors at once; only the discounted reverse sum needs the loop.
    deltas = rewards + gamma * values[..., 1:] - values[..., :-1]
    advantages = torch.zeros_like(rewards)
    running = rewards.new_zeros(rewards.shape[:-1])
    for t in reversed(range(steps)):
        running = deltas[..., t] + gamma * lam * running
        advantages[..., t] = running
    return advantages, advantages + values[..., :-1]


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and unbiased std; a single value (or none) has std 0 by convention."""
    if not xs:
        return 0.0, 0.0
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mean, 0.0
    var = math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return mean, math.sqrt(var)


def process_advantages(
    step_rewards: list[list[float]],
    group_size: int,
    *,
    std_scaling: str = "group",
    eps: float = 1e-4,
) -> list[list[float]]:
    """Per-step advantages from per-step rewards (GRPO process supervision, §4.1.3).

    Each step reward is normalised with the mean and unbiased std of *all* step
    rewards in its group, ``r~ = (r - mean_group) / (std + eps)``; a step's advantage
    is the sum of the normalised rewards of that step and every later step of the
    same trajectory (so early steps are credited with what they led to).

    Args:
        step_rewards: B lists (one per trajectory, variable length, possibly empty),
            in consecutive groups of ``group_size``.
        group_size: G, trajectories per prompt.
        std_scaling: ``"group"`` the group's std, ``"batch"`` the std of every step
            reward in the batch, ``"none"`` no division. The mean is always the
            group's. A single step reward has std 0.
        eps: added to the std.

    Returns:
        B lists of floats, shaped like ``step_rewards``.
    """
    _check_std_scaling(std_scaling)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if len(step_rewards) % group_size != 0:
        raise ValueError(
            f"{len(step_rewards)} trajectories is not divisible by group_size "
            f"{group_size}"
        )
    _, batch_std = _mean_std([r for traj in step_rewards for r in traj])
    out: list[list[float]] = []
    for start in range(0, len(step_rewards), group_size):
        group = step_rewards[start : start + group_size]
        mean, std = _mean_std([r for traj in group for r in traj])
        scale = {"group": std + eps, "batch": batch_std + eps, "none": 1.0}[std_scaling]
        for traj in group:
            normalised = [(r - mean) / scale for r in traj]
            # Reverse cumulative sum: advantage_t = sum_{j >= t} r~_j.
            advantages, running = [], 0.0
            for r in reversed(normalised):
                running += r
                advantages.append(running)
            out.append(advantages[::-1])
    return out
