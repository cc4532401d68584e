"""The correction modes TRL users expect, against references worked out by hand and
against TRL 1.16's own computation on the same tensors (issue 23, item 3).

TRL's importance-sampling modes and its loss are inline code in
``GRPOTrainer._generate_and_score_completions`` / ``_compute_loss``
(trl/trainer/grpo_trainer.py, trl 1.16.0); the few lines are reproduced in
``_trl_*`` below, as written there. ``get_high_entropy_mask`` is a method: it is
called unbound with a one-process stand-in for ``self.accelerator``.
"""

from __future__ import annotations

import math

import pytest
import torch

# Learner 0 everywhere; sampler [-ln2, ln2, -ln4]: ratios [2, .5, 4] (shared with
# the truncation tests).
from test_correction import LN2, OLD, ONES, SAMPLER, close  # noqa: E402

from trainer.algorithms import (
    high_entropy_mask,
    kl_penalty,
    policy_loss,
    rollout_weights,
)


# ----- masked importance sampling, lower bound ------------------------------------
def test_token_mask_zeroes_the_ratios_out_of_bounds_and_keeps_the_others():
    # cap 3: 4 is out -> [2, .5, 0]; masked 1 of 3; mean weight 2.5 / 3.
    w, m = rollout_weights(OLD, SAMPLER, ONES, kind="token", cap=3.0, mode="mask")
    close(w, [[2.0, 0.5, 0.0]])
    close(m["rollout_correction/masked_frac"], 1 / 3)
    close(m["rollout_correction/weight_mean"], 2.5 / 3)


def test_a_lower_bound_masks_or_truncates_below_it():
    # lower .6: .5 is below. mask -> [2, 0, 0]; truncate -> [2, .6, 3].
    w, m = rollout_weights(
        OLD, SAMPLER, ONES, kind="token", cap=3.0, mode="mask", lower=0.6
    )
    close(w, [[2.0, 0.0, 0.0]])
    close(m["rollout_correction/low_frac"], 1 / 3)
    close(m["rollout_correction/masked_frac"], 2 / 3)
    w, _ = rollout_weights(OLD, SAMPLER, ONES, kind="token", cap=3.0, lower=0.6)
    close(w, [[2.0, 0.6, 3.0]])


def test_sequence_mask_drops_the_whole_sequence_or_keeps_its_ratio():
    # Product 2 * .5 * 4 = 4: above cap 3 -> every token 0; under cap 5 -> 4.
    w, m = rollout_weights(OLD, SAMPLER, ONES, kind="sequence", cap=3.0, mode="mask")
    close(w, [[0.0, 0.0, 0.0]])
    close(m["rollout_correction/masked_frac"], 1.0)
    w, _ = rollout_weights(OLD, SAMPLER, ONES, kind="sequence", cap=5.0, mode="mask")
    close(w, [[4.0, 4.0, 4.0]])
    # Sampler [ln2, ln2, 0]: product .25; lower .5 -> masked, or truncated to .5.
    low = torch.tensor([[LN2, LN2, 0.0]], dtype=torch.float64)
    w, _ = rollout_weights(
        OLD, low, ONES, kind="sequence", cap=2.0, mode="mask", lower=0.5
    )
    close(w, [[0.0, 0.0, 0.0]])
    w, _ = rollout_weights(OLD, low, ONES, kind="sequence", cap=2.0, lower=0.5)
    close(w, [[0.5, 0.5, 0.5]])


def test_bad_mode_and_lower_are_refused():
    with pytest.raises(ValueError, match="'truncate', 'mask'"):
        rollout_weights(OLD, SAMPLER, ONES, kind="token", cap=2.0, mode="reject")
    with pytest.raises(ValueError, match="lower"):
        rollout_weights(OLD, SAMPLER, ONES, kind="token", cap=2.0, lower=1.5)


# ----- KL abs ---------------------------------------------------------------------
def test_kl_abs_is_the_absolute_log_ratio_never_clamped():
    # verl's "abs" kl_penalty: |logp - ref|; verl clamps only low_var_kl (our k3).
    logp = torch.tensor([[LN2, -LN2, 0.0, 30.0]])
    ref = torch.zeros(1, 4)
    close(kl_penalty(logp, ref, kind="abs", clamp=None), [[LN2, LN2, 0.0, 30.0]])
    close(kl_penalty(logp, ref, kind="abs", clamp=10.0), [[LN2, LN2, 0.0, 30.0]])


# ----- two-sided clip delta -------------------------------------------------------
def _one_token(ratio: float, adv: float, **kw):
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, m = policy_loss(
        "ppo_clip",
        logp,
        old,
        torch.tensor([adv], dtype=torch.float64),
        torch.ones(1, 1),
        agg="token_mean",
        clip_low=0.2,
        clip_high=0.2,
        **kw,
    )
    loss.backward()
    return float(loss.detach()), float(logp.grad), m


def test_delta_caps_a_negative_advantage_tokens_ratio():
    # r 4, A -1: -min(4 * -1, 1.2 * -1) = 4; with delta 3: -min(3 * -1, -1.2) = 3,
    # and past delta the gradient is 0 (the unclipped term's r is clamped).
    loss, grad, _ = _one_token(4.0, -1.0)
    close(loss, 4.0)
    close(grad, 4.0)  # d(-r A)/dlogp = -A r = 4
    loss, grad, m = _one_token(4.0, -1.0, delta=3.0)
    close(loss, 3.0)
    close(grad, 0.0)
    close(m["clip_ratio/delta_mean"], 1.0)
    # Under delta, or A > 0: unchanged (r .5, A 1: -min(.5, .8) = -.5).
    close(_one_token(2.0, -1.0, delta=3.0)[0], 2.0)
    close(_one_token(0.5, 1.0, delta=3.0)[0], -0.5)


def test_delta_is_refused_where_it_does_not_apply():
    with pytest.raises(ValueError, match="delta must be > 1"):
        _one_token(1.0, 1.0, delta=1.0)
    with pytest.raises(ValueError, match="cispo"):
        policy_loss(
            "cispo",
            torch.zeros(1, 1),
            torch.zeros(1, 1),
            torch.ones(1),
            torch.ones(1, 1),
            agg="token_mean",
            clip_low=1.0,
            clip_high=4.0,
            delta=2.0,
        )


# ----- top_entropy_quantile -------------------------------------------------------
# Trained entropies .1 .5 .9 .3 | .7 .2, sorted .1 .2 .3 .5 .7 .9; the padding (5.0)
# must not count.
ENT = torch.tensor([[0.1, 0.5, 0.9, 0.3], [0.7, 0.2, 5.0, 5.0]])
MASK = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0]])


def test_top_entropy_quantile_by_hand():
    # rho .5: quantile .5 at position 2.5 -> .3 + .5 * (.5 - .3) = .4: keeps .5 .9 .7.
    close(
        high_entropy_mask(ENT, MASK, 0.5).float(),
        [[0.0, 1, 1, 0], [1, 0, 0, 0]],
    )
    # rho .2: quantile .8 at position 4 -> .7: keeps .9 and .7 (>=, ties stay).
    close(high_entropy_mask(ENT, MASK, 0.2).float(), [[0.0, 0, 1, 0], [1, 0, 0, 0]])
    # rho 0: only the highest; rho 1: every trained token, never the padding.
    close(high_entropy_mask(ENT, MASK, 0.0).float(), [[0.0, 0, 1, 0], [0, 0, 0, 0]])
    close(high_entropy_mask(ENT, MASK, 1.0).float(), MASK)
    assert not high_entropy_mask(ENT, torch.zeros_like(MASK), 0.5).any()


# ----- against TRL 1.16 -----------------------------------------------------------
def _trl_is_ratio(old, sampling, mask, mode, clip_min, clip_max):
    """trl 1.16.0 grpo_trainer.py, _generate_and_score_completions (lines 2660-2705)."""
    per_token_logps_diff = (old - sampling) * mask
    per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)
    if mode in ["sequence_mask", "sequence_truncate"]:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        invalid = (ratio < min_val) | (ratio > max_val)
        ratio = ratio.masked_fill(invalid, value=0.0)
    return ratio


def _trl_loss(logp, old, adv, mask, *, eps, delta, is_ratio, entropy_mask, loss_type):
    """trl 1.16.0 grpo_trainer.py, _compute_loss (lines 3083-3170), token level."""
    advantages = adv.unsqueeze(1)
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - eps, 1 + eps)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if entropy_mask is not None:
        per_token_loss = per_token_loss * entropy_mask
    if is_ratio is not None:
        per_token_loss = per_token_loss * is_ratio
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)  # bnpo


class _OneProcess:
    """``self.accelerator`` of a single process, for TRL's unbound method."""

    class accelerator:  # noqa: N801
        @staticmethod
        def pad_across_processes(x, dim=0, pad_index=0):
            return x

        @staticmethod
        def gather(x):
            return x


@pytest.fixture(scope="module")
def trl_trainer():
    pytest.importorskip("trl")
    from trl.trainer.grpo_trainer import GRPOTrainer

    return GRPOTrainer


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 9
    old = torch.randn(B, T, generator=g, dtype=torch.float64) * 0.3 - 1.5
    sampling = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.3
    logp = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.4
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    lengths = torch.tensor([9, 7, 5, 9, 3, 8])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    entropy = torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    return old, sampling, logp, adv, mask, entropy


@pytest.mark.parametrize(
    ("mode", "lower", "cap"),
    [
        ("token_truncate", None, 1.3),
        ("token_truncate", 0.8, 1.3),
        ("token_mask", None, 1.3),
        ("token_mask", 0.8, 1.3),
        ("sequence_truncate", 0.5, 2.0),
        ("sequence_mask", 0.5, 2.0),
        ("sequence_mask", None, 1.5),
    ],
)
def test_importance_weights_match_trl(mode, lower, cap):
    old, sampling, _, _, mask, _ = _batch(1)
    kind, how = mode.split("_")
    ours, _ = rollout_weights(
        old, sampling, mask, kind=kind, cap=cap, mode=how, lower=lower
    )
    theirs = _trl_is_ratio(old, sampling, mask, mode, lower, cap).expand_as(old)
    keep = mask > 0  # TRL gives padding a ratio too; it never reaches the loss
    close(ours[keep], theirs[keep], tol=1e-12)
    if how == "mask":  # the configurations above do mask something
        assert bool((ours[keep] == 0).any())


@pytest.mark.parametrize("rho", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_high_entropy_mask_matches_trl(trl_trainer, rho):
    _, _, _, _, mask, entropy = _batch(2)
    entropy = entropy.float()
    entropy[mask == 0] = 10.0  # padding with the highest entropy: excluded by both
    theirs = trl_trainer.get_high_entropy_mask(_OneProcess(), entropy, mask, 1 - rho)
    assert torch.equal(high_entropy_mask(entropy, mask, rho), theirs)


@pytest.mark.parametrize(
    ("loss_type", "agg"), [("grpo", "seq_mean_token_mean"), ("bnpo", "token_mean")]
)
@pytest.mark.parametrize("mode", ["token_mask", "sequence_mask", "token_truncate"])
def test_the_whole_loss_matches_trl(trl_trainer, loss_type, agg, mode):
    # Every option at once: masked/truncated IS with a lower bound, delta, rho .5.
    old, sampling, logp, adv, mask, entropy = _batch(3)
    entropy = entropy.float()  # a model's entropies (TRL takes its quantile in f32)
    kind, how = mode.split("_")
    is_w, _ = rollout_weights(
        old, sampling, mask, kind=kind, cap=1.5, mode=how, lower=0.7
    )
    trl_is = _trl_is_ratio(old, sampling, mask, mode, 0.7, 1.5)
    high = high_entropy_mask(entropy, mask, 0.5)
    trl_high = trl_trainer.get_high_entropy_mask(_OneProcess(), entropy, mask, 0.5)
    ours, _ = policy_loss(
        "ppo_clip",
        logp,
        old,
        adv,
        mask,
        agg=agg,
        clip_low=0.2,
        clip_high=0.2,
        weights=is_w * high,
        delta=1.25,
    )
    theirs = _trl_loss(
        logp,
        old,
        adv,
        mask,
        eps=0.2,
        delta=1.25,
        is_ratio=trl_is,
        entropy_mask=trl_high,
        loss_type=loss_type,
    )
    close(ours, theirs, tol=1e-12)
