"""Per-token policy losses, their aggregation over tokens, and the auxiliary losses.

* :data:`LOSSES`: a registry of per-token policy losses (``@LOSSES.register``):
  ``ppo_clip`` (PPO, arXiv 1707.06347; asymmetric clip bounds as DAPO's clip-higher,
  arXiv 2503.14476; optional dual clip, arXiv 1912.09729, and two-sided clip
  ``delta``, INTELLECT-2 arXiv 2505.07291), ``cispo`` (MiniMax-M1,
  arXiv 2506.13585) and ``gspo`` (sequence-level ratios, arXiv 2507.18071).
* :func:`agg_loss`: the one function that turns a (B, T) loss matrix into a scalar;
  every loss here goes through it, so the aggregation choice (the main difference
  between GRPO, DAPO and Dr. GRPO) lives in one place.
* :func:`policy_loss`: the public entry point, with TRL-named clip metrics.
* :func:`value_loss`: the critic's loss (KL estimators live in :mod:`.kl`).

Masking contract: ``mask`` is (B, T), non-zero / True marks a trained token. Masked
tokens contribute neither loss nor gradient, even when their log-probs are NaN or inf
(prompt tokens' log-probs are NaN in trajectory records). An all-masked batch gives a
loss of 0 that is still attached to the graph, never NaN.

This module knows nothing of presets, models or rewards.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import Tensor

from rewards.registry import Registry

# verl clamps the log-ratio before exp so one stale token cannot overflow to inf.
_MAX_LOG_RATIO = 20.0

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")

# A per-token policy loss: (logprobs, old_logprobs, advantages) all (B, T), keywords
# clip_low, clip_high, mask (B, T) bool or None, dual_clip where supported -> (B, T).
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
    mask: Tensor | None = None,
    dual_clip: float | None = None,
    delta: float | None = None,
) -> Tensor:
    """PPO's clipped surrogate, per token: -min(r A, clip(r, 1-lo, 1+hi) A).

    The min makes the objective pessimistic: once the ratio has moved past the bound
    in the direction the advantage rewards, the token stops pushing (zero gradient).
    ``clip_high > clip_low`` is DAPO's clip-higher, which leaves room for unlikely
    tokens to grow and so slows entropy collapse (arXiv 2503.14476 §3.1).
    ``dual_clip`` = c > 1 caps the loss of a negative-advantage token at -c A (dual-
    clip PPO, arXiv 1912.09729; verl's ``clip_ratio_c``): without it a token whose
    ratio has exploded (r >> 1, A < 0) contributes an unbounded -r A.
    ``delta`` = d > 1 is TRL's two-sided clip (GRPOConfig ``delta``, INTELLECT-2,
    arXiv 2505.07291): the unclipped term's ratio is clamped to at most d, i.e.
    ``-min(min(r, d) A, clip(r, 1-lo, 1+hi) A)``; for A < 0 the loss stops growing
    (and its gradient is 0) once r > d.
    All tensors (B, T); ``mask`` is unused (per-token loss). Returns (B, T).
    """
    ratio = torch.exp((logprobs - old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    return _clipped_surrogate(ratio, advantages, clip_low, clip_high, dual_clip, delta)


def _clipped_surrogate(
    ratio: Tensor,
    advantages: Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    delta: float | None = None,
) -> Tensor:
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    if delta is not None:  # TRL: coef_2 from the raw ratio, then coef_1 clamped
        ratio = ratio.clamp(max=delta)
    loss = -torch.minimum(ratio * advantages, clipped * advantages)
    if dual_clip is None:
        return loss
    capped = torch.minimum(loss, -dual_clip * advantages)
    return torch.where(advantages < 0, capped, loss)


@LOSSES.register("cispo")
def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    mask: Tensor | None = None,
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


def _sequence_log_ratio(
    logprobs: Tensor, old_logprobs: Tensor, mask: Tensor | None
) -> Tensor:
    """(B, 1): the mean over each sequence's trained tokens of logp - old_logp,
    detached (0 for a sequence with none)."""
    log_ratio = (logprobs - old_logprobs).detach()
    keep = torch.ones_like(log_ratio, dtype=torch.bool) if mask is None else mask
    return masked_mean(log_ratio, keep, dim=1).unsqueeze(1)


@LOSSES.register("gspo")
def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    mask: Tensor | None = None,
    dual_clip: float | None = None,
    delta: float | None = None,
) -> Tensor:
    """GSPO (arXiv 2507.18071, eq. 7 and §4.3), per token, in the token-level form.

    The importance ratio is the sequence's length-normalised likelihood ratio
    ``s_i = exp(mean_t (logp_t - old_logp_t))`` over its trained tokens (``mask``;
    None: all). Each token carries ``s_i,t = sg(s_i) * exp(logp_t - sg(logp_t))``:
    equal to ``s_i`` in value, with gradient ``s_i * grad logp_t``, so per-token
    advantages work too and a sequence-constant advantage gives the paper's gradient.
    The clip is PPO's on ``s_i,t`` (the paper's bounds are tiny: 3e-4 / 4e-4, since a
    sequence ratio moves far less than a token one). All tensors (B, T); returns
    (B, T). Token-level noise no longer decides what is clipped, which is what makes it
    stable for MoE models (Qwen3). ``delta``: the two-sided clip of
    :func:`ppo_clip_loss` on the sequence ratio (TRL with
    ``importance_sampling_level="sequence"``).
    """
    seq = _sequence_log_ratio(logprobs, old_logprobs, mask)
    log_ratio = seq + logprobs - logprobs.detach()
    # verl clamps the sequence log-ratio at 10 before exp (exp(10) is already absurd).
    ratio = torch.exp(log_ratio.clamp(max=10.0))
    return _clipped_surrogate(ratio, advantages, clip_low, clip_high, dual_clip, delta)


# The ratio the clip acts on, per loss (token ratio unless listed): for the metrics.
def _token_ratio(logp: Tensor, old: Tensor, keep: Tensor) -> Tensor:
    return (logp - old).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()


def _gspo_ratio(logp: Tensor, old: Tensor, keep: Tensor) -> Tensor:
    seq = _sequence_log_ratio(logp, old, keep).clamp(max=10.0).exp()
    return seq.expand_as(logp)


_METRIC_RATIO = {"gspo": _gspo_ratio}


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
    ratio: Tensor,
    advantages: Tensor,
    keep: Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    delta: float | None = None,
) -> dict[str, float]:
    """TRL GRPOTrainer's clip metrics: the fraction of trained tokens whose clip is
    active, i.e. the ratio is past a bound in the direction the advantage pushes;
    with a dual clip, ``clip_ratio/dual_mean`` the fraction whose loss it capped;
    with ``delta``, ``clip_ratio/delta_mean`` the fraction whose loss the two-sided
    clip capped (r > delta, A < 0)."""
    low = (ratio < 1.0 - clip_low) & (advantages < 0)
    high = (ratio > 1.0 + clip_high) & (advantages > 0)
    has_tokens = bool(keep.any())
    out = {
        "clip_ratio/low_mean": float(masked_mean(low.float(), keep)),
        "clip_ratio/high_mean": float(masked_mean(high.float(), keep)),
        "clip_ratio/region_mean": float(masked_mean((low | high).float(), keep)),
        # No trained token: report the untouched-policy ratio rather than 0.
        "ratio/mean": float(masked_mean(ratio, keep)) if has_tokens else 1.0,
        "ratio/max": float(ratio[keep].max()) if has_tokens else 1.0,
    }
    if dual_clip is not None:
        dual = (ratio.clamp(min=1.0 - clip_low) > dual_clip) & (advantages < 0)
        out["clip_ratio/dual_mean"] = float(masked_mean(dual.float(), keep))
    if delta is not None:
        capped = (ratio > delta) & (advantages < 0)
        out["clip_ratio/delta_mean"] = float(masked_mean(capped.float(), keep))
    return out


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
    dual_clip: float | None = None,
    weights: Tensor | None = None,
    delta: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The policy-gradient loss of one minibatch.

    Args:
        name: a registered loss (``"ppo_clip"``, ``"cispo"`` or ``"gspo"``); unknown:
            KeyError.
        logprobs: (B, T) log pi_theta of the sampled tokens (differentiable).
        old_logprobs: (B, T) log-probs under the sampling policy (not differentiated).
        advantages: (B,) broadcast over T, or (B, T) per token (not differentiated).
        mask: (B, T) float or bool, non-zero = trained token.
        agg, max_len: see :func:`agg_loss`.
        clip_low, clip_high: the ratio is clipped to [1 - clip_low, 1 + clip_high].
        dual_clip: c > 1 caps a negative-advantage token's loss at -c A (``ppo_clip``
            and ``gspo``; another loss with it is a ValueError). None: off.
        weights: (B, T) or (B, 1) per-token factors on the loss, not differentiated:
            the truncated or masked importance weights of :func:`rollout_weights`,
            times a top-entropy mask. A weight of 0 takes a token out of the loss
            (its gradient is 0) but not out of the normaliser, as TRL. None: 1.
        delta: d > 1, TRL's two-sided clip (``ppo_clip`` and ``gspo``): the
            unclipped ratio is clamped to at most d. None: off.

    Returns:
        ``(loss, metrics)``: a scalar tensor, and python floats named as TRL does
        (``clip_ratio/low_mean|high_mean|region_mean``, ``ratio/mean``, ``ratio/max``,
        ``policy_loss``; ``clip_ratio/dual_mean`` with a dual clip). For ``gspo`` the
        ratio in the metrics is the sequence ratio.
    """
    loss_fn = LOSSES.get(name)
    if old_logprobs.shape != logprobs.shape or mask.shape != logprobs.shape:
        raise ValueError(
            f"logprobs, old_logprobs and mask must share a (B, T) shape, got "
            f"{tuple(logprobs.shape)}, {tuple(old_logprobs.shape)}, {tuple(mask.shape)}"
        )
    extra: dict[str, float] = {}
    if dual_clip is not None:
        if "dual_clip" not in inspect.signature(loss_fn).parameters:
            raise ValueError(f"dual_clip does not apply to the {name!r} loss")
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        extra["dual_clip"] = dual_clip
    if delta is not None:
        if "delta" not in inspect.signature(loss_fn).parameters:
            raise ValueError(f"delta does not apply to the {name!r} loss")
        if delta <= 1.0:
            raise ValueError(f"delta must be > 1, got {delta}")
        extra["delta"] = delta
    keep = _bool_mask(mask)
    adv = _broadcast_advantages(advantages.detach(), logprobs.shape)
    # Sanitise masked positions before any arithmetic: torch.where's backward would
    # otherwise multiply a zero gradient by a NaN derivative and poison the batch.
    zeros = torch.zeros_like(logprobs)
    logp = torch.where(keep, logprobs, zeros)
    old = torch.where(keep, old_logprobs.detach(), zeros)
    adv = torch.where(keep, adv.to(logprobs.dtype), zeros)

    loss_mat = loss_fn(
        logp, old, adv, clip_low=clip_low, clip_high=clip_high, mask=keep, **extra
    )
    if weights is not None:
        loss_mat = loss_mat * weights.detach().to(loss_mat.dtype)
    loss = agg_loss(loss_mat, keep, agg, max_len=max_len)

    with torch.no_grad():
        ratio = _METRIC_RATIO.get(name, _token_ratio)(logp, old, keep)
        metrics = _clip_metrics(ratio, adv, keep, clip_low, clip_high, dual_clip, delta)
    metrics["policy_loss"] = float(loss.detach())
    return loss, metrics


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
