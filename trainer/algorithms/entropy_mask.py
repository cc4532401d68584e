"""Training only on the forking tokens: the top-entropy quantile of a batch.

Wang et al. 2025, "Beyond the 80/20 rule: high-entropy minority tokens drive
effective RL for LLM reasoning" (arXiv 2506.01939): the policy gradient restricted to
the ~20% of tokens with the highest entropy (the points where the reasoning forks)
matches or beats the full gradient. TRL 1.16 calls it ``top_entropy_quantile`` (rho;
``GRPOTrainer.get_high_entropy_mask`` in trl/trainer/grpo_trainer.py) and this module
follows it exactly:

* the threshold is ``torch.quantile`` (linear interpolation) at ``1 - rho`` of the
  entropies of every trained token of the minibatch (all processes' together;
  padding and untrained tokens excluded), not per sequence;
* a token is kept when its entropy is ``>=`` the threshold, so ties at the threshold
  stay and ``rho = 0`` keeps the highest-entropy token(s) only, ``rho = 1`` all;
* the entropy is the current policy's, from the training forward, detached.

Pure torch; the loop decides what a masked token means (no loss, a mask reason).
"""

from __future__ import annotations

import torch
from torch import Tensor

# torch.quantile refuses inputs above 2**24 elements; past that, sort and interpolate.
_QUANTILE_MAX = 2**24


def entropy_threshold(entropies: Tensor, q: float) -> Tensor:
    """The ``q`` quantile (linear interpolation, as ``torch.quantile``) of a 1-D
    tensor of entropies (non-empty)."""
    flat = entropies.detach().float().reshape(-1)
    if flat.numel() <= _QUANTILE_MAX:
        return torch.quantile(flat, q)
    ordered = flat.sort().values
    pos = q * (ordered.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, ordered.numel() - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def high_entropy_mask(
    entropies: Tensor,
    mask: Tensor,
    quantile: float,
    *,
    pool: Tensor | None = None,
) -> Tensor:
    """Which trained tokens are in the top ``quantile`` of entropy.

    Args:
        entropies: (B, T) per-token entropy of the policy (>= 0).
        mask: (B, T) float or bool, non-zero = trained token.
        quantile: rho in [0, 1], the share of tokens kept (TRL's
            ``top_entropy_quantile``); 1 keeps every trained token.
        pool: the 1-D entropies the threshold is taken over, when they are more
            than this process's (several processes: every rank's trained tokens).
            None: ``entropies[mask]``.

    Returns:
        (B, T) bool, True = trained and kept; all False when nothing is trained.
    """
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    keep = mask.bool() if mask.dtype == torch.bool else mask != 0
    values = entropies.detach().float()
    if pool is None:
        pool = values[keep]
    if pool.numel() == 0:
        return torch.zeros_like(keep)
    threshold = entropy_threshold(pool, 1.0 - quantile)
    masked = torch.where(keep, values, torch.zeros_like(values))
    return (masked >= threshold) & keep
