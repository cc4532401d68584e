"""KL to a frozen reference: the per-token estimators and the adaptive coefficient.

Schulman's estimators of KL(pi || pi_ref) from samples of pi ("Approximating KL
divergence", 2020), with ``d = logp - ref_logp`` the log-ratio of a sampled token:

* ``k1 = d``: unbiased, high variance, negative on some tokens;
* ``k2 = d^2 / 2``: biased, low variance, its gradient is the true KL's (the one
  verl's ``mse`` uses);
* ``k3 = exp(-d) + d - 1``: unbiased and never negative (GRPO, arXiv 2402.03300
  eq. 4; verl's ``low_var_kl``);
* ``abs = |d|``: verl's ``abs`` kl_penalty, never negative, linear (not quadratic)
  in the log-ratio, so a far-off token pulls no harder than a near one.

Only k3 is clamped to ``[-clamp, clamp]``, as verl clamps its ``low_var_kl`` (to
[-10, 10]) and nothing else: k3 grows as exp(-d), so one diverged token would dominate
the batch (at d = -15 it is exp(15) = 3.3 million unclamped, 10 clamped). k1 and k2
grow linearly and quadratically and stay unclamped: a clamp would zero their
gradient on exactly the diverged tokens it should pull back (k2 hits 10 at
|d| = 4.47).
:func:`adaptive_kl_coef` is the proportional controller of Ziegler et al. (arXiv
1909.08593 §2.2) that moves the coefficient towards a target KL.

Pure torch; nothing here knows about models, presets or the loop.
"""

from __future__ import annotations

import torch
from torch import Tensor

KL_KINDS = ("k1", "k2", "k3", "abs")

# exp() of a log-ratio past this overflows float32 for no useful information.
_MAX_LOG_RATIO = 20.0


def kl_penalty(
    logprobs: Tensor, ref_logprobs: Tensor, *, kind: str, clamp: float | None = 10.0
) -> Tensor:
    """A per-token estimate of KL(pi || pi_ref).

    Args:
        logprobs: (B, T) log pi of the sampled tokens (differentiable).
        ref_logprobs: (B, T) log pi_ref of the same tokens (not differentiated).
            Masked positions should hold finite values (the caller zeroes them):
            a NaN there would poison the gradient.
        kind: ``"k1"``, ``"k2"``, ``"k3"`` or ``"abs"`` (see the module docstring).
        clamp: k3 is clamped to ``[-clamp, clamp]`` (gradient 0 past it), as verl's
            ``low_var_kl``; k1, k2 and abs never are. None: not clamped.

    Returns:
        (B, T) per-token estimates (k2, k3 and abs are >= 0).
    """
    d = logprobs - ref_logprobs.detach()
    if kind == "k1":
        kl = d
    elif kind == "k2":
        kl = 0.5 * d.square()
    elif kind == "k3":
        neg = (-d).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        # exp(x) >= 1 + x exactly, but rounding can dip a hair below zero.
        kl = (torch.exp(neg) - neg - 1.0).clamp(min=0.0)
    elif kind == "abs":
        kl = d.abs()
    else:
        allowed = ", ".join(repr(k) for k in KL_KINDS)
        raise ValueError(f"kind must be one of {allowed}, got {kind!r}")
    if clamp is not None:
        if clamp <= 0:
            raise ValueError(f"clamp must be > 0 or None, got {clamp}")
        if kind == "k3":
            kl = kl.clamp(-clamp, clamp)
    return kl


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor | None = None) -> Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref), per token, unclamped.

    ``exp(ref - logp) - (ref - logp) - 1``: unbiased for the KL under samples from
    pi, and never negative, unlike the plain log-ratio. Kept for outside callers;
    :func:`kl_penalty` (``kind="k3"``) is the same with a clamp.

    Args:
        logprobs, ref_logprobs: (B, T); the reference is not differentiated.
        mask: optional (B, T); masked positions give exactly 0 (and no NaN gradient
            when their log-probs are NaN). Returns (B, T), >= 0.
    """
    if mask is not None:
        keep = mask if mask.dtype == torch.bool else mask != 0
        zeros = torch.zeros_like(logprobs)
        logprobs = torch.where(keep, logprobs, zeros)
        ref_logprobs = torch.where(keep, ref_logprobs.detach(), zeros)
    return kl_penalty(logprobs, ref_logprobs, kind="k3", clamp=None)


def adaptive_kl_coef(
    coef: float, kl: float, *, target: float, horizon: int, n_steps: int = 1
) -> float:
    """The next KL coefficient of the adaptive controller (arXiv 1909.08593 §2.2).

    ``e = clip(kl / target - 1, -0.2, 0.2)``; ``coef * (1 + e * n_steps / horizon)``:
    above the target the coefficient grows, below it shrinks, by at most 20% per
    ``horizon`` samples (verl's ``AdaptiveKLController``), and by at most 20% in
    one update.

    Args:
        coef: the current coefficient (beta).
        kl: the KL measured this step (mean per token).
        target: the KL to steer towards (> 0).
        horizon: steps over which a 20% error moves the coefficient by 20%.
        n_steps: samples (trajectories) since the last update, as verl counts
            them: a step of 64 samples moves the coefficient 64 times as far.
    """
    if target <= 0 or horizon < 1:
        raise ValueError(
            f"target must be > 0 and horizon >= 1, got {target}, {horizon}"
        )
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    # More samples than the horizon in one update move it by the whole 20%: verl's
    # formula would overshoot, past zero at 5x the horizon.
    return coef * (1.0 + error * min(n_steps / horizon, 1.0))
