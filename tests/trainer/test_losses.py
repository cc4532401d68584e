"""Policy losses, aggregation, masking, KL and value losses, worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms import (
    LOSSES,
    agg_loss,
    kl_k3,
    masked_mean,
    policy_loss,
    value_loss,
)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


def logprobs_with_ratios(ratios, old=None):
    """Leaf log-probs (B, T) whose ratio to ``old`` (default 0) is ``ratios``."""
    r = torch.tensor(ratios, dtype=torch.float64)
    old = torch.zeros_like(r) if old is None else torch.as_tensor(old, dtype=r.dtype)
    return (old + r.log()).requires_grad_(True), old


# --- ppo_clip ---------------------------------------------------------------------

RATIOS = [[1.1, 1.5, 0.5], [1.1, 1.5, 0.5]]
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)  # row 0: A = +1, row 1: A = -1
ONES = torch.ones(2, 3)


def ppo(logp, old, adv=ADV, mask=ONES, agg="token_mean", **kw):
    kw.setdefault("clip_low", 0.2)
    kw.setdefault("clip_high", 0.2)
    return policy_loss("ppo_clip", logp, old, adv, mask, agg=agg, **kw)


def test_ppo_clip_per_token_values_inside_and_outside_the_clip():
    # clip range [.8, 1.2]. Per token -min(r A, clip(r) A):
    #   A=+1: r 1.1 -> -1.1 | r 1.5 -> -min(1.5, 1.2) = -1.2 | r .5 -> -min(.5, .8) = -.5
    #   A=-1: r 1.1 ->  1.1 | r 1.5 -> -min(-1.5, -1.2) = 1.5 | r .5 -> -min(-.5, -.8) = .8
    # token_mean: (-1.1 - 1.2 - .5 + 1.1 + 1.5 + .8) / 6 = .6 / 6 = .1
    logp, old = logprobs_with_ratios(RATIOS)
    loss, metrics = ppo(logp, old)
    close(loss, 0.1)
    close(metrics["policy_loss"], 0.1)
    per_token = LOSSES.get("ppo_clip")(
        logp, old, ADV[:, None].expand(2, 3), clip_low=0.2, clip_high=0.2
    )
    close(per_token, [[-1.1, -1.2, -0.5], [1.1, 1.5, 0.8]])


def test_ppo_clip_gradient_is_zero_where_the_clip_is_active():
    # d(-r A)/d logp = -r A where the unclipped term is the min, else 0; / 6 tokens.
    #   A=+1: [-1.1, 0 (clipped high), -.5]   A=-1: [1.1, 1.5, 0 (clipped low)]
    logp, old = logprobs_with_ratios(RATIOS)
    loss, _ = ppo(logp, old)
    loss.backward()
    close(logp.grad, [[-1.1 / 6, 0.0, -0.5 / 6], [1.1 / 6, 1.5 / 6, 0.0]])


def test_ppo_clip_uses_asymmetric_bounds():
    # DAPO clip-higher: range [.8, 1.28]; A=+1, r 1.25 is no longer clipped: -1.25.
    logp, old = logprobs_with_ratios([[1.25]])
    loss, _ = ppo(logp, old, torch.tensor([1.0]), torch.ones(1, 1), clip_high=0.28)
    close(loss, -1.25)
    loss, _ = ppo(logp, old, torch.tensor([1.0]), torch.ones(1, 1), clip_high=0.2)
    close(loss, -1.2)


def test_clip_metrics_follow_trl_definitions():
    # low = r < .8 & A < 0: row 1, r .5 -> 1 of 6; high = r > 1.2 & A > 0: row 0,
    # r 1.5 -> 1 of 6 (row 1's r 1.5 has A < 0, row 0's r .5 has A > 0: not counted).
    # ratio mean = 2 * (1.1 + 1.5 + .5) / 6 = 3.1 / 3; max 1.5.
    logp, old = logprobs_with_ratios(RATIOS)
    _, m = ppo(logp, old)
    close(m["clip_ratio/low_mean"], 1 / 6)
    close(m["clip_ratio/high_mean"], 1 / 6)
    close(m["clip_ratio/region_mean"], 2 / 6)
    close(m["ratio/mean"], 3.1 / 3)
    close(m["ratio/max"], 1.5)
    assert all(isinstance(v, float) for v in m.values())


def test_clip_metrics_count_only_trained_tokens():
    # Mask out row 1: low 0 of 3, high 1 of 3; ratio max over row 0 is 1.5.
    logp, old = logprobs_with_ratios(RATIOS)
    _, m = ppo(logp, old, mask=torch.tensor([[1.0, 1, 1], [0, 0, 0]]))
    close(m["clip_ratio/low_mean"], 0.0)
    close(m["clip_ratio/high_mean"], 1 / 3)
    close(m["ratio/mean"], 3.1 / 3)


def test_per_token_advantages_are_accepted():
    # (B, T) advantages equal to the broadcast (B,) ones give the same loss.
    logp, old = logprobs_with_ratios(RATIOS)
    loss_bt, _ = ppo(logp, old, adv=ADV[:, None].expand(2, 3).clone())
    close(loss_bt, 0.1)


def test_an_unknown_loss_name_is_a_key_error_listing_known_ones():
    logp, old = logprobs_with_ratios(RATIOS)
    with pytest.raises(KeyError, match="cispo, gspo, ppo_clip"):
        policy_loss(
            "reinforce",
            logp,
            old,
            ADV,
            ONES,
            agg="token_mean",
            clip_low=0.2,
            clip_high=0.2,
        )


def test_mismatched_shapes_are_rejected():
    logp, old = logprobs_with_ratios(RATIOS)
    with pytest.raises(ValueError, match="advantages"):
        ppo(logp, old, adv=torch.ones(3))
    with pytest.raises(ValueError, match="mask"):
        ppo(logp, old, mask=torch.ones(2, 2))


def test_dual_clip_caps_a_negative_advantage_token_with_a_large_ratio():
    # clip [.8, 1.2], c = 3. Row 0 (A = -1): r 10 -> PPO 10, capped to 3; r 2 -> 2
    # (under the cap). Row 1 (A = +1): r 10 and r 2 -> clipped to -1.2 (untouched by
    # the dual clip). token_mean (3 + 2 - 1.2 - 1.2) / 4 = .65; without it 2.4.
    ratios = [[10.0, 2.0], [10.0, 2.0]]
    adv = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    logp, old = logprobs_with_ratios(ratios)
    loss, m = ppo(logp, old, adv=adv, mask=torch.ones(2, 2), dual_clip=3.0)
    close(loss, 0.65)
    close(m["clip_ratio/dual_mean"], 0.25)
    plain, _ = ppo(logp, old, adv=adv, mask=torch.ones(2, 2))
    close(plain, 2.4)
    # Gradient: the capped token gets none; r 2 with A -1 gets d(-r A)/dlogp / 4 = .5.
    loss.backward()
    close(logp.grad, [[0.0, 0.5], [0.0, 0.0]])


def test_dual_clip_must_exceed_one_and_is_refused_by_cispo():
    logp, old = logprobs_with_ratios(RATIOS)
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        ppo(logp, old, dual_clip=1.0)
    with pytest.raises(ValueError, match="cispo"):
        policy_loss(
            "cispo",
            logp,
            old,
            ADV,
            ONES,
            agg="token_mean",
            clip_low=1.0,
            clip_high=4.0,
            dual_clip=3.0,
        )


def test_weights_multiply_each_tokens_loss_without_a_gradient():
    # r = 1, A = +1: per-token loss -1; weights [2, .5] -> token_mean -(2 + .5) / 2
    # = -1.25 and gradient -w / 2 = [-1, -.25]; the weights get none.
    logp, old = logprobs_with_ratios([[1.0, 1.0]])
    w = torch.tensor([[2.0, 0.5]], dtype=torch.float64, requires_grad=True)
    loss, _ = ppo(logp, old, torch.tensor([1.0]), torch.ones(1, 2), weights=w)
    close(loss, -1.25)
    loss.backward()
    close(logp.grad, [[-1.0, -0.25]])
    assert w.grad is None


# --- gspo -------------------------------------------------------------------------


def gspo(logp, old, adv, mask, agg="token_mean", **kw):
    kw.setdefault("clip_low", 0.2)
    kw.setdefault("clip_high", 0.2)
    return policy_loss("gspo", logp, old, adv, mask, agg=agg, **kw)


def test_gspo_uses_the_sequence_ratio_on_every_token():
    # Token log-ratios [.2, 0]: s = exp(mean) = exp(.1) = 1.105171, inside [.8, 1.2].
    # A = +1: each token -s; token_mean -1.105171 (PPO's token ratios would give
    # -(exp(.2) + 1) / 2 = -1.110701).
    logp, old = logprobs_with_ratios([[math.exp(0.2), 1.0]])
    loss, m = gspo(logp, old, torch.tensor([1.0]), torch.ones(1, 2))
    s = math.exp(0.1)
    close(loss, -s)
    close(m["ratio/mean"], s)
    close(m["ratio/max"], s)


def test_gspo_gradient_is_the_sequence_ratio_times_the_token_score():
    # d(-s_i,t A)/dlogp_t = -s A (the sg() keeps s constant): the same -s / 2 on both
    # tokens, whatever their own ratio (PPO: -exp(.2) / 2 and -1 / 2).
    logp, old = logprobs_with_ratios([[math.exp(0.2), 1.0]])
    loss, _ = gspo(logp, old, torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    s = math.exp(0.1)
    close(logp.grad, [[-s / 2, -s / 2]])
    assert old.grad is None


def test_gspo_clips_the_whole_sequence():
    # Log-ratios [.4, .2]: s = exp(.3) = 1.349859 > 1.2. A = +1: every token -1.2,
    # no gradient; A = -1: -min(-s, -1.2) = s, gradient +s / 4 per token (4 tokens).
    logp, old = logprobs_with_ratios([[math.exp(0.4), math.exp(0.2)]] * 2)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, m = gspo(logp, old, adv, torch.ones(2, 2))
    s = math.exp(0.3)
    close(loss, (-2.4 + 2 * s) / 4)
    close(m["clip_ratio/high_mean"], 0.5)
    loss.backward()
    close(logp.grad, [[0.0, 0.0], [s / 4, s / 4]])


def test_gspo_sequence_ratio_ignores_masked_tokens():
    # A masked third token with log-ratio 5 (or NaN) must not enter the mean: s is
    # still exp(.1).
    logp, old = logprobs_with_ratios([[math.exp(0.2), 1.0, math.exp(5.0)]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = gspo(logp, old, torch.tensor([1.0]), mask)
    close(loss, -math.exp(0.1))


def test_gspo_accepts_per_token_advantages():
    # A = [+1, -1] per token, s = exp(.1): losses [-s, s], mean 0; gradient
    # [-s / 2, s / 2].
    logp, old = logprobs_with_ratios([[math.exp(0.2), 1.0]])
    adv = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    loss, _ = gspo(logp, old, adv, torch.ones(1, 2))
    close(loss, 0.0)
    loss.backward()
    s = math.exp(0.1)
    close(logp.grad, [[-s / 2, s / 2]])


# --- cispo ------------------------------------------------------------------------


def cispo_case():
    # Ratios [2, 6], A = .5 on both tokens, logp = [-1, -.5].
    # clip_low 1.0, clip_high 4.0 -> weight = clip(r, 0, 5) = [2, 5].
    logp = torch.tensor([[-1.0, -0.5]], dtype=torch.float64, requires_grad=True)
    old = (logp.detach() - torch.tensor([[math.log(2), math.log(6)]])).requires_grad_()
    return logp, old, torch.tensor([0.5], dtype=torch.float64)


def test_cispo_value():
    # Per token -w A logp: -2 * .5 * -1 = 1; -5 * .5 * -.5 = 1.25; mean 1.125.
    logp, old, adv = cispo_case()
    loss, m = policy_loss(
        "cispo",
        logp,
        old,
        adv,
        torch.ones(1, 2),
        agg="token_mean",
        clip_low=1.0,
        clip_high=4.0,
    )
    close(loss, 1.125)
    close(m["ratio/max"], 6.0)
    close(m["clip_ratio/high_mean"], 0.5)  # r 6 > 5 with A > 0


def test_cispo_gradient_flows_only_through_logp():
    # The weight is stop-gradient, so d loss / d logp = -clip(r) A / N:
    # [-2 * .5 / 2, -5 * .5 / 2] = [-.5, -1.25]; the clipped token still gets one.
    logp, old, adv = cispo_case()
    loss, _ = policy_loss(
        "cispo",
        logp,
        old,
        adv,
        torch.ones(1, 2),
        agg="token_mean",
        clip_low=1.0,
        clip_high=4.0,
    )
    loss.backward()
    close(logp.grad, [[-0.5, -1.25]])
    assert old.grad is None


def test_ppo_clip_sends_no_gradient_to_old_logprobs():
    logp, old = logprobs_with_ratios(RATIOS)
    old.requires_grad_(True)
    loss, _ = ppo(logp, old)
    loss.backward()
    assert old.grad is None


# --- aggregation ------------------------------------------------------------------

LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
RAGGED = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


def test_token_mean_weighs_every_trained_token_equally():
    # (1 + 2 + 3 + 5) / 4 tokens = 2.75
    close(agg_loss(LOSS_MAT, RAGGED, "token_mean"), 2.75)


def test_seq_mean_token_mean_averages_per_sequence_first():
    # row 0: (1 + 2 + 3) / 3 = 2; row 1: 5 / 1 = 5; mean (2 + 5) / 2 = 3.5
    close(agg_loss(LOSS_MAT, RAGGED, "seq_mean_token_mean"), 3.5)


def test_seq_mean_token_mean_skips_sequences_without_trained_tokens():
    # A third, fully masked row must not pull the mean towards 0: still 3.5.
    loss_mat = torch.cat([LOSS_MAT, torch.full((1, 4), 9.0)])
    mask = torch.cat([RAGGED, torch.zeros(1, 4)])
    close(agg_loss(loss_mat, mask, "seq_mean_token_mean"), 3.5)


def test_seq_mean_token_sum_norm_divides_by_batch_times_max_len():
    # (1 + 2 + 3 + 5) / (2 * 4) = 1.375; with max_len 10: 11 / 20 = .55
    close(agg_loss(LOSS_MAT, RAGGED, "seq_mean_token_sum_norm"), 1.375)
    close(agg_loss(LOSS_MAT, RAGGED, "seq_mean_token_sum_norm", max_len=10), 0.55)


def test_dr_grpo_normaliser_does_not_depend_on_the_lengths():
    # Unit per-token loss: token_mean is 1 whatever the lengths, while the constant
    # normaliser gives tokens / (B * T): 4 / 8, then 6 / 8 with a longer row 1.
    ones = torch.ones(2, 4)
    longer = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    close(agg_loss(ones, RAGGED, "seq_mean_token_sum_norm"), 4 / 8)
    close(agg_loss(ones, longer, "seq_mean_token_sum_norm"), 6 / 8)
    close(agg_loss(ones, RAGGED, "token_mean"), 1.0)
    close(agg_loss(ones, longer, "token_mean"), 1.0)


def test_agg_accepts_a_bool_mask():
    close(agg_loss(LOSS_MAT, RAGGED.bool(), "token_mean"), 2.75)


def test_an_unknown_agg_names_the_allowed_modes():
    with pytest.raises(ValueError, match="seq_mean_token_sum_norm"):
        agg_loss(LOSS_MAT, RAGGED, "sum")


@pytest.mark.parametrize(
    "agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
)
def test_an_empty_mask_gives_zero_loss_with_the_graph_intact(agg):
    logp, old = logprobs_with_ratios(RATIOS)
    loss, m = ppo(logp, old, mask=torch.zeros(2, 3), agg=agg)
    assert loss.item() == 0.0
    assert loss.requires_grad
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros(2, 3, dtype=torch.float64))
    assert not any(math.isnan(v) for v in m.values())


# --- masking ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ppo_clip", "cispo", "gspo"])
@pytest.mark.parametrize(
    "agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
)
def test_masked_tokens_contribute_neither_loss_nor_gradient(name, agg):
    # Garbage (NaN, inf) at masked positions must not change the loss or the
    # gradient of trained tokens, and the masked ones get exactly 0.
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    kw = dict(agg=agg, clip_low=0.2, clip_high=0.28)
    clean, old = logprobs_with_ratios(RATIOS)
    loss_clean, _ = policy_loss(name, clean, old, ADV, mask, **kw)
    loss_clean.backward()

    dirty_vals = clean.detach().clone()
    dirty_vals[0, 2], dirty_vals[1, 1], dirty_vals[1, 2] = math.nan, math.inf, -math.inf
    dirty = dirty_vals.requires_grad_(True)
    old_dirty = old.clone()
    old_dirty[1, 2] = math.nan
    loss_dirty, m = policy_loss(name, dirty, old_dirty, ADV, mask, **kw)
    loss_dirty.backward()

    close(loss_dirty, loss_clean)
    close(dirty.grad * mask, clean.grad * mask)
    assert torch.equal(dirty.grad * (1 - mask), torch.zeros(2, 3, dtype=torch.float64))
    assert not any(math.isnan(v) for v in m.values())


def test_masked_mean_ignores_masked_positions_and_is_zero_when_empty():
    x = torch.tensor([[1.0, math.nan], [3.0, 5.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    close(masked_mean(x, mask), 3.0)  # (1 + 3 + 5) / 3
    close(masked_mean(x, mask, dim=1), [1.0, 4.0])
    close(masked_mean(x, torch.zeros(2, 2)), 0.0)


# --- kl_k3 ------------------------------------------------------------------------


def test_kl_k3_is_zero_when_the_policies_agree():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    assert torch.equal(kl_k3(logp, logp.clone()), torch.zeros(1, 3))


def test_kl_k3_is_positive_otherwise():
    # d = ref - logp. d = ln 2: 2 - ln 2 - 1 = .306853; d = -ln 2: .5 + ln 2 - 1 = .193147
    ln2 = math.log(2)
    kl = kl_k3(torch.tensor([[0.0, ln2]]), torch.tensor([[ln2, 0.0]]))
    close(kl, [[1 - ln2, ln2 - 0.5]])
    assert (kl > 0).all()


def test_kl_k3_mask_zeroes_masked_positions_without_nan_gradients():
    logp = torch.tensor([[0.0, math.nan]], requires_grad=True)
    kl = kl_k3(logp, torch.tensor([[math.log(2), 0.0]]), torch.tensor([[1.0, 0.0]]))
    close(kl, [[1 - math.log(2), 0.0]])
    agg_loss(kl, torch.tensor([[1.0, 0.0]]), "token_mean").backward()
    # d k3 / d logp = -(exp(d) - 1) = -(2 - 1) = -1 at the trained token.
    close(logp.grad, [[-1.0, 0.0]])


# --- value_loss -------------------------------------------------------------------


def test_value_loss_is_half_the_masked_squared_error():
    # errors (1-0)^2 = 1, (2-2)^2 = 0, third masked: .5 * (1 + 0) / 2 = .25
    values = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    returns = torch.tensor([[0.0, 2.0, 5.0]])
    loss = value_loss(values, returns, torch.tensor([[1.0, 1.0, 0.0]]))
    close(loss, 0.25)
    loss.backward()
    close(values.grad, [[0.5, 0.0, 0.0]])  # (V - R) / 2 tokens


def test_value_loss_takes_the_larger_of_plain_and_clipped_error():
    # token 0: V 1, old 1.5, R 0, clip .2 -> V_clip = 1.5 - .2 = 1.3;
    #   max(1^2, 1.3^2) = 1.69. token 1: V = old = R = 2 -> 0.
    # .5 * (1.69 + 0) / 2 = .4225
    values = torch.tensor([[1.0, 2.0]])
    returns = torch.tensor([[0.0, 2.0]])
    old = torch.tensor([[1.5, 2.0]])
    loss = value_loss(values, returns, torch.ones(1, 2), old_values=old, clip=0.2)
    close(loss, 0.4225)


def test_value_loss_clip_sends_no_gradient_where_the_clipped_error_wins():
    # token 0: V 1, old 1.5, R 0 -> clipped error 1.69 wins, and V_clip = old - .2 is
    #   flat in V: gradient 0. token 1: V 1, old 1.5, R 3 -> plain (1 - 3)^2 = 4 beats
    #   (1.3 - 3)^2 = 2.89. Loss .5 * (1.69 + 4) / 2 = 1.4225; d/dV1 = (V - R) / 2 = -1.
    values = torch.tensor([[1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    returns = torch.tensor([[0.0, 3.0]], dtype=torch.float64)
    old = torch.tensor([[1.5, 1.5]], dtype=torch.float64)
    loss = value_loss(values, returns, torch.ones(1, 2), old_values=old, clip=0.2)
    close(loss, 1.4225)
    loss.backward()
    close(values.grad, [[0.0, -1.0]])


def test_value_loss_clip_needs_old_values():
    with pytest.raises(ValueError, match="old_values"):
        value_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), clip=0.2)


def test_value_loss_uses_the_requested_aggregation():
    # seq_mean_token_sum_norm: .5 * 1 / (1 * 3) = 1/6
    loss = value_loss(
        torch.tensor([[1.0, 2.0, 3.0]]),
        torch.tensor([[0.0, 2.0, 5.0]]),
        torch.tensor([[1.0, 1.0, 0.0]]),
        agg="seq_mean_token_sum_norm",
    )
    close(loss, 1 / 6)
