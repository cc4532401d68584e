"""Per-token policy losses, their aggregation over tokens, and the auxiliary losses.

* :data:`LOSSES`: a registry of per-token policy losses (``@LOSSES.register``):
  ``ppo_clip`` (PPO, arXiv 1707.06347; asymmetric clip bounds as DAPO's clip-higher,
  arXiv 2503.14476) and ``cispo`` (MiniMax-M1, arXiv 2506.13585).
* :func:`agg_loss`: the one function that turns a (B, T) loss matrix into a scalar;
  every loss here goes through it, so the aggregation choice (the main difference
  between GRPO, DAPO and Dr. GRPO) lives in one place.
* :func:`policy_loss`: the public entry point, with TRL-named clip metrics.
* :func:`kl_k3` and :func:`value_loss`: the KL penalty and the critic's loss.

Masking contract: ``mask`` is (B, T), non-zero / True marks a trained token. Masked
tokens contribute neither loss nor gradient, even when their log-probs are NaN or inf
(prompt tokens' log-probs are NaN in trajectory records). An all-masked batch gives a
loss of 0 that is still attached to the graph, never NaN.

This module knows nothing of presets, models or rewards.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rewards.registry import Registry

# verl clamps the log-ratio before exp so one stale token cannot overflow to inf.
_MAX_LOG_RATIO = 20.0

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")

# A per-token policy loss: (logprobs, old_logprobs, advantages) all (B, T) -> (B, T).
PolicyLossFn = Callable[..., Tensor]
LOSSES: Registry[PolicyLossFn] = Registry("policy loss")


def _bool_mask(mask: Tensor) -> Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set; 0 where none is.

    Args:
        x: any shape; ``mask`` broadcastable to it (float or bool).
        dim: reduce only this dimension; None reduces everything to a scalar.
    """
    keep = _bool_mask(mask)
    total = torch.where(keep, x, torch.zeros_like(x))
    count = keep.to(x.dtype).expand_as(x)
    if dim is None:
        return total.sum() / count.sum().clamp(min=1.0)
    return total.sum(dim) / count.sum(dim).clamp(min=1.0)


def agg_loss(
    loss_mat: Tensor, mask: Tensor, agg: str, max_len: int | None = None
) -> Tensor:
    """Aggregate a per-token loss matrix into a scalar.

    Args:
        loss_mat: (B, T) per-token losses.
        mask: (B, T) float or bool, non-zero = trained token.
        agg: ``"token_mean"`` every trained token weighs the same (DAPO's
            token-level loss, arXiv 2503.14476 §3.3); ``"seq_mean_token_mean"`` mean
            per sequence, then mean over sequences with at least one trained token
            (GRPO, arXiv 2402.03300: long answers' tokens weigh less);
            ``"seq_mean_token_sum_norm"`` sum over tokens / (B * max_len), a constant
            normaliser, so no length bias (Dr. GRPO, arXiv 2503.20783).
        max_len: the constant of ``seq_mean_token_sum_norm``; defaults to T. Pass the
            generation budget so the normaliser does not depend on batch padding.

    Returns:
        A scalar tensor.
    """
    if loss_mat.dim() != 2 or mask.shape != loss_mat.shape:
        raise ValueError(
            f"loss_mat and mask must both be (B, T), got {tuple(loss_mat.shape)} "
            f"and {tuple(mask.shape)}"
        )
    keep = _bool_mask(mask)
    # where, not multiply: NaN * 0 is NaN, and masked positions may hold NaN.
    kept = torch.where(keep, loss_mat, torch.zeros_like(loss_mat))
    if agg == "token_mean":
        return kept.sum() / keep.sum().clamp(min=1).to(kept.dtype)
    if agg == "seq_mean_token_mean":
        tokens = keep.sum(dim=1)
        seq_loss = kept.sum(dim=1) / tokens.clamp(min=1).to(kept.dtype)
        has_tokens = tokens > 0
        # Sequences with no trained token have no mean; they must not dilute others.
        seq_loss = torch.where(has_tokens, seq_loss, torch.zeros_like(seq_loss))
        return seq_loss.sum() / has_tokens.sum().clamp(min=1).to(kept.dtype)
    if agg == "seq_mean_token_sum_norm":
        length = loss_mat.shape[1] if max_len is None else max_len
        if length < 1:
            raise ValueError(f"max_len must be >= 1, got {length}")
        return kept.sum() / max(loss_mat.shape[0] * length, 1)
    allowed = ", ".join(repr(a) for a in AGGREGATIONS)
    raise ValueError(f"agg must be one of {allowed}, got {agg!r}")


@LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> Tensor:
    """PPO's clipped surrogate, per token: -min(r A, clip(r, 1-lo, 1+hi) A).

    The min makes the objective pessimistic: once the ratio has moved past the bound
    in the direction the advantage rewards, the token stops pushing (zero gradient).
    ``clip_high > clip_low`` is DAPO's clip-higher, which leaves room for unlikely
    tokens to grow and so slows entropy collapse (arXiv 2503.14476 §3.1).
    All tensors (B, T); returns (B, T).
    """
    ratio = torch.exp((logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return -torch.minimum(ratio * advantages, clipped * advantages)


@LOSSES.register("cispo")
def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> Tensor:
    """CISPO, per token: -sg(clip(r, 1-lo, 1+hi)) A log pi (MiniMax-M1, 2506.13585).

    PPO's clip zeroes the gradient of clipped tokens, and those are often the rare
    "fork" tokens that matter most; CISPO clips (and stops the gradient of) the
    importance weight instead, so every token keeps a REINFORCE gradient
    ``-w A grad log pi`` with a bounded weight. ``clip_low=1.0`` means no lower bound
    beyond 0. All tensors (B, T); returns (B, T).
    """
    log_ratio = (logprobs - old_logprobs).detach()
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return -weight * advantages * logprobs


def _broadcast_advantages(advantages: Tensor, shape: torch.Size) -> Tensor:
    if advantages.shape == shape:
        return advantages
    if advantages.dim() == 1 and advantages.shape[0] == shape[0]:
        return advantages.unsqueeze(1).expand(shape)
    raise ValueError(
        f"advantages must be (B,) or (B, T) for logprobs {tuple(shape)}, "
        f"got {tuple(advantages.shape)}"
    )


def _clip_metrics(
    ratio: Tensor, advantages: Tensor, keep: Tensor, clip_low: float, clip_high: float
) -> dict[str, float]:
    """TRL GRPOTrainer's clip metrics: the fraction of trained tokens whose clip is
    active, i.e. the ratio is past a bound in the direction the advantage pushes."""
    low = (ratio < 1.0 - clip_low) & (advantages < 0)
    high = (ratio > 1.0 + clip_high) & (advantages > 0)
    has_tokens = bool(keep.any())
    return {
        "clip_ratio/low_mean": float(masked_mean(low.float(), keep)),
        "clip_ratio/high_mean": float(masked_mean(high.float(), keep)),
        "clip_ratio/region_mean": float(masked_mean((low | high).float(), keep)),
        # No trained token: report the untouched-policy ratio rather than 0.
        "ratio/mean": float(masked_mean(ratio, keep)) if has_tokens else 1.0,
        "ratio/max": float(ratio[keep].max()) if has_tokens else 1.0,
    }


def policy_loss(
    name: str,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    agg: str,
    clip_low: float,
    clip_high: float,
    max_len: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The policy-gradient loss of one minibatch.

    Args:
        name: a registered loss (``"ppo_clip"`` or ``"cispo"``); unknown: KeyError.
        logprobs: (B, T) log pi_theta of the sampled tokens (differentiable).
        old_logprobs: (B, T) log-probs under the sampling policy (not differentiated).
        advantages: (B,) broadcast over T, or (B, T) per token (not differentiated).
        mask: (B, T) float or bool, non-zero = trained token.
        agg, max_len: see :func:`agg_loss`.
        clip_low, clip_high: the ratio is clipped to [1 - clip_low, 1 + clip_high].

    Returns:
        ``(loss, metrics)``: a scalar tensor, and python floats named as TRL does
        (``clip_ratio/low_mean|high_mean|region_mean``, ``ratio/mean``, ``ratio/max``,
        ``policy_loss``).
    """
    loss_fn = LOSSES.get(name)
    if old_logprobs.shape != logprobs.shape or mask.shape != logprobs.shape:
        raise ValueError(
            f"logprobs, old_logprobs and mask must share a (B, T) shape, got "
            f"{tuple(logprobs.shape)}, {tuple(old_logprobs.shape)}, {tuple(mask.shape)}"
        )
    keep = _bool_mask(mask)
    adv = _broadcast_advantages(advantages.detach(), logprobs.shape)
    # Sanitise masked positions before any arithmetic: torch.where's backward would
    # otherwise multiply a zero gradient by a NaN derivative and poison the batch.
    zeros = torch.zeros_like(logprobs)
    logp = torch.where(keep, logprobs, zeros)
    old = torch.where(keep, old_logprobs.detach(), zeros)
    adv = torch.where(keep, adv.to(logprobs.dtype), zeros)

    loss_mat = loss_fn(logp, old, adv, clip_low=clip_low, clip_high=clip_high)
    loss = agg_loss(loss_mat, keep, agg, max_len=max_len)

    with torch.no_grad():
        log_ratio = (logp - old).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        metrics = _clip_metrics(log_ratio.exp(), adv, keep, clip_low, clip_high)
    metrics["policy_loss"] = float(loss.detach())
    return loss, metrics


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor | None = None) -> Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref), per token.

    ``exp(ref - logp) - (ref - logp) - 1``: unbiased for the KL under samples from
    pi, and never negative, unlike the plain log-ratio (Schulman, "Approximating KL
    divergence", 2020; used by GRPO, arXiv 2402.03300 eq. 4).

    Args:
        logprobs, ref_logprobs: (B, T); the reference is not differentiated.
        mask: optional (B, T); masked positions give exactly 0 (and no NaN gradient
            when their log-probs are NaN). Returns (B, T), >= 0.
    """
    diff = ref_logprobs.detach() - logprobs
    if mask is not None:
        diff = torch.where(_bool_mask(mask), diff, torch.zeros_like(diff))
    diff = diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    # exp(d) >= 1 + d exactly, but rounding can dip a hair below zero.
    return (torch.exp(diff) - diff - 1.0).clamp(min=0.0)


def value_loss(
    values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    agg: str = "token_mean",
    old_values: Tensor | None = None,
    clip: float | None = None,
) -> Tensor:
    """The critic's loss: 0.5 (V - R)^2 per token, aggregated by :func:`agg_loss`.

    With ``clip`` and ``old_values`` the PPO-style clipped value loss is used
    (``max`` of the plain and the clipped error, as in OpenAI baselines / CleanRL),
    which stops the critic from moving far from its rollout-time estimate.

    Args:
        values: (B, T) predicted values (differentiable).
        returns: (B, T) targets, e.g. from :func:`gae_advantages` (not differentiated).
        mask: (B, T), non-zero = trained token.
        old_values: (B, T) values at rollout time; required with ``clip``.
    """
    keep = _bool_mask(mask)
    zeros = torch.zeros_like(values)
    vals = torch.where(keep, values, zeros)
    targets = torch.where(keep, returns.detach().to(values.dtype), zeros)
    err = (vals - targets) ** 2
    if clip is not None:
        if old_values is None:
            raise ValueError("value_loss: clip needs old_values")
        old = torch.where(keep, old_values.detach().to(values.dtype), zeros)
        clipped = old + (vals - old).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - targets) ** 2)
    return agg_loss(0.5 * err, keep, agg)
