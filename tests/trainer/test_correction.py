"""Truncated importance weights against the sampler, and the mismatch metrics."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms import mismatch_metrics, rollout_weights

LN2 = math.log(2)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


# Learner 0 everywhere; sampler [-ln2, ln2, -ln4]: ratios pi_old / pi_sampler
# = exp(0 - sampler) = [2, .5, 4].
OLD = torch.zeros(1, 3, dtype=torch.float64)
SAMPLER = torch.tensor([[-LN2, LN2, -2 * LN2]], dtype=torch.float64)
ONES = torch.ones(1, 3)


def test_token_weights_are_the_ratios_capped():
    # cap 3: [2, .5, 3]; one of three capped; mean 5.5 / 3.
    w, m = rollout_weights(OLD, SAMPLER, ONES, kind="token", cap=3.0)
    close(w, [[2.0, 0.5, 3.0]])
    close(m["rollout_correction/capped_frac"], 1 / 3)
    close(m["rollout_correction/weight_mean"], 5.5 / 3)


def test_sequence_weight_is_the_product_of_ratios_capped():
    # 2 * .5 * 4 = 4 -> capped to 3 on every token; with cap 5: 4.
    w, m = rollout_weights(OLD, SAMPLER, ONES, kind="sequence", cap=3.0)
    close(w, [[3.0, 3.0, 3.0]])
    close(m["rollout_correction/capped_frac"], 1.0)
    w, _ = rollout_weights(OLD, SAMPLER, ONES, kind="sequence", cap=5.0)
    close(w, [[4.0, 4.0, 4.0]])


def test_masked_tokens_and_tokens_without_a_sampler_logprob_weigh_one():
    # Token 1 masked, token 2 has no sampler log-prob (NaN): only token 0 counts;
    # the sequence weight is then exp(ln 2) = 2.
    sampler = SAMPLER.clone()
    sampler[0, 2] = math.nan
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    w, _ = rollout_weights(OLD, sampler, mask, kind="token", cap=3.0)
    close(w, [[2.0, 1.0, 1.0]])
    w, _ = rollout_weights(OLD, sampler, mask, kind="sequence", cap=3.0)
    close(w, [[2.0, 1.0, 1.0]])


def test_bad_kind_and_cap_are_refused():
    with pytest.raises(ValueError, match="'token', 'sequence'"):
        rollout_weights(OLD, SAMPLER, ONES, kind="batch", cap=2.0)
    with pytest.raises(ValueError, match="cap"):
        rollout_weights(OLD, SAMPLER, ONES, kind="token", cap=0.5)


def test_mismatch_metrics_by_hand():
    # |learner - sampler| = [ln2, ln2, 2 ln2] -> mean 4 ln2 / 3 = .924196; ratios
    # exp(learner - sampler) = [2, .5, 4]: mean 6.5 / 3, min .5, max 4.
    m = mismatch_metrics(OLD, SAMPLER, ONES)
    close(m["rollout/logprob_diff"], 4 * LN2 / 3)
    close(m["rollout/ratio_mean"], 6.5 / 3)
    close(m["rollout/ratio_min"], 0.5)
    close(m["rollout/ratio_max"], 4.0)


def test_identical_logprobs_show_a_ratio_of_one():
    m = mismatch_metrics(SAMPLER, SAMPLER.clone(), ONES)
    assert m["rollout/logprob_diff"] == 0.0
    assert m["rollout/ratio_mean"] == m["rollout/ratio_min"] == 1.0


def test_no_sampler_logprobs_give_no_metrics():
    assert mismatch_metrics(OLD, torch.full((1, 3), math.nan), ONES) == {}
