"""Sampler/learner mismatch: truncated or masked importance weights, their statistics.

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

Two modes, as TRL 1.16's ``vllm_importance_sampling_mode`` (``token_truncate``,
``token_mask``, ``sequence_truncate``, ``sequence_mask``; trl/trainer/grpo_trainer.py):

* ``"truncate"``: the ratio is clamped to ``[lower, cap]`` (TIS);
* ``"mask"``: a ratio outside ``[lower, cap]`` gives weight 0 (masked importance
  sampling, MIS: the token, or the whole sequence, leaves the loss), one inside keeps
  its ratio as weight. As in TRL the masked tokens stay in the loss's normaliser (they
  add 0); verl's rejection sampling (``rollout_rs`` with ``rollout_rs_threshold`` /
  ``rollout_rs_threshold_lower``) takes them out of the response mask instead.

``lower`` is TRL's ``vllm_importance_sampling_clip_min`` (verl's
``rollout_rs_threshold_lower``); None: no lower bound.

Nothing here knows about models or rollouts: tensors in, weights and metrics out.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.algorithms.losses import masked_mean

CORRECTION_KINDS = ("token", "sequence")
CORRECTION_MODES = ("truncate", "mask")
_MAX_LOG_RATIO = 20.0


def rollout_weights(
    old_logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    *,
    kind: str,
    cap: float,
    mode: str = "truncate",
    lower: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Truncated (or masked) importance weights of the learner against the sampler.

    Args:
        old_logprobs: (B, T) the learner's log-probs of the sampled tokens before the
            update (pi_old).
        sampler_logprobs: (B, T) the sampler's log-probs of the same tokens; NaN
            where the sampler reported none (those tokens get weight 1).
        mask: (B, T) non-zero = trained token; masked tokens get weight 1.
        kind: ``"token"`` or ``"sequence"``.
        cap: the weight's upper bound (>= 1; verl's default is 2, TRL's 3).
        mode: ``"truncate"`` clamps the ratio to ``[lower, cap]``; ``"mask"`` gives
            a ratio outside it weight 0 (see the module docstring).
        lower: the lower bound (0 <= lower <= 1); None: none.

    Returns:
        ``(weights, metrics)``: (B, T) detached weights, and
        ``rollout_correction/weight_mean``, ``rollout_correction/capped_frac``
        (share of trained tokens whose ratio was above the cap) and, with a lower
        bound, ``rollout_correction/low_frac`` (below it); in mask mode
        ``rollout_correction/masked_frac`` (share of trained tokens given weight 0).
    """
    if kind not in CORRECTION_KINDS:
        allowed = ", ".join(repr(k) for k in CORRECTION_KINDS)
        raise ValueError(f"kind must be one of {allowed}, got {kind!r}")
    if mode not in CORRECTION_MODES:
        allowed = ", ".join(repr(k) for k in CORRECTION_MODES)
        raise ValueError(f"mode must be one of {allowed}, got {mode!r}")
    if cap < 1.0:
        raise ValueError(f"cap must be >= 1, got {cap}")
    if lower is not None and not 0.0 <= lower <= 1.0:
        raise ValueError(f"lower must be in [0, 1], got {lower}")
    keep = (mask != 0) & torch.isfinite(sampler_logprobs)
    diff = (old_logprobs.detach() - sampler_logprobs).nan_to_num(0.0)
    diff = torch.where(keep, diff, torch.zeros_like(diff))
    if kind == "sequence":
        diff = diff.sum(dim=1, keepdim=True).expand_as(diff)
    raw = diff.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).exp()
    low = raw < lower if lower is not None else torch.zeros_like(keep)
    high = raw > cap
    if mode == "truncate":
        bounded = raw.clamp(min=lower, max=cap)
    else:  # MIS: out of bounds -> 0, in bounds -> the ratio itself (TRL)
        bounded = raw.masked_fill(low | high, 0.0)
    weights = torch.where(keep, bounded, torch.ones_like(raw))
    metrics = {
        "rollout_correction/weight_mean": float(masked_mean(weights, keep))
        if bool(keep.any())
        else 1.0,
        "rollout_correction/capped_frac": float(masked_mean(high.float(), keep)),
    }
    if lower is not None:
        metrics["rollout_correction/low_frac"] = float(masked_mean(low.float(), keep))
    if mode == "mask":
        out = (low | high).float()
        metrics["rollout_correction/masked_frac"] = float(masked_mean(out, keep))
    return weights, metrics


def is_masked(weights: Tensor, mask: Tensor) -> Tensor:
    """(B, T) bool: the trained tokens that masked importance sampling left out
    (weight exactly 0; an unmasked ratio is exp(.) > 0)."""
    return (mask != 0) & (weights == 0)


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
