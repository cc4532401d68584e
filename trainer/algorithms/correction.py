"""Sampler/learner mismatch: truncated importance weights and their statistics.

The tokens of a batch were sampled by the rollout engine, whose log-probs can differ
from the learner's for the same weights (bf16 sampling, other kernels) or come from
older weights (an asynchronous rollout a step behind). PPO's ratio is taken against
the learner's own ``old_logprobs``, so that difference is invisible to it; truncated
importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly
brings you off-policy RL training"; verl's ``tis_imp_ratio_cap``) multiplies each
token's loss by ``min(pi_old / pi_sampler, cap)``:

* ``"token"``: one weight per token, ``min(exp(old_t - sampler_t), cap)``;
* ``"sequence"``: one per sequence, ``min(exp(sum_t (old_t - sampler_t)), cap)``,
  the exact correction for a sequence-level objective, with more variance.

Nothing here knows about models or rollouts: tensors in, weights and metrics out.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.algorithms.losses import masked_mean

CORRECTION_KINDS = ("token", "sequence")
_MAX_LOG_RATIO = 20.0


def rollout_weights(
    old_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    *,
    kind: str,
    cap: float,
) -> tuple[Tensor, dict[str, float]]:
    """Truncated importance weights of the learner against the sampler.

    Args:
        old_logprobs: (B, T) the learner's log-probs of the sampled tokens before the
            update (pi_old).
        sampler_logprobs: (B, T) the sampler's log-probs of the same tokens; NaN
            where the sampler reported none (those tokens get weight 1).
        mask: (B, T) non-zero = trained token; masked tokens get weight 1.
        kind: ``"token"`` or ``"sequence"``.
        cap: the weight's upper bound (>= 1; verl's default is 2).

    Returns:
        ``(weights, metrics)``: (B, T) detached weights, and
        ``rollout_correction/weight_mean`` and ``rollout_correction/capped_frac``
        (share of trained tokens whose weight was capped).
    """
    if kind not in CORRECTION_KINDS:
        allowed = ", ".join(repr(k) for k in CORRECTION_KINDS)
        raise ValueError(f"kind must be one of {allowed}, got {kind!r}")
    if cap < 1.0:
        raise ValueError(f"cap must be >= 1, got {cap}")
    keep = (mask != 0) & torch.isfinite(sampler_logprobs)
    diff = (old_logprobs.detach() - sampler_logprobs).nan_to_num(0.0)
    diff = torch.where(keep, diff, torch.zeros_like(diff))
    if kind == "sequence":
        diff = diff.sum(dim=1, keepdim=True).expand_as(diff)
    raw = diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    weights = torch.where(keep, raw.clamp(max=cap), torch.ones_like(raw))
    metrics = {
        "rollout_correction/weight_mean": float(masked_mean(weights, keep))
        if bool(keep.any())
        else 1.0,
        "rollout_correction/capped_frac": float(masked_mean((raw > cap).float(), keep)),
    }
    return weights, metrics


def mismatch_metrics(
    learner_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor
) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's, over trained tokens.

    ``rollout/logprob_diff``: mean |learner - sampler|; ``rollout/ratio_mean``,
    ``rollout/ratio_min``, ``rollout/ratio_max``: of the token ratio
    ``exp(learner - sampler)`` (1 when the two agree). Tokens without a sampler
    log-prob (NaN) are left out; with none at all the dict is empty.
    """
    keep = (mask != 0) & torch.isfinite(sampler_logprobs)
    if not bool(keep.any()):
        return {}
    diff = (learner_logprobs.detach() - sampler_logprobs)[keep].double()
    ratio = diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    return {
        "rollout/logprob_diff": float(diff.abs().mean()),
        "rollout/ratio_mean": float(ratio.mean()),
        "rollout/ratio_min": float(ratio.min()),
        "rollout/ratio_max": float(ratio.max()),
    }
