"""KL estimators, their clamp, and the adaptive coefficient, worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms import adaptive_kl_coef, kl_penalty

LN2 = math.log(2)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


def case(d):
    """Leaf log-probs with log-ratios ``d = logp - ref`` (ref = 0)."""
    logp = torch.tensor([d], dtype=torch.float64, requires_grad=True)
    return logp, torch.zeros_like(logp)


# d = ln 2 and d = -ln 2, per kind: (values, gradients d kl / d logp)
#   k1 = d:                   [ .693147, -.693147], grad [1, 1]
#   k2 = d^2 / 2:             [ .240227,  .240227], grad d = [.693147, -.693147]
#   k3 = exp(-d) + d - 1:     [ .5 + ln2 - 1, 2 - ln2 - 1] = [.193147, .306853],
#                             grad 1 - exp(-d) = [.5, -1]
EXPECTED = {
    "k1": ([LN2, -LN2], [1.0, 1.0]),
    "k2": ([LN2**2 / 2, LN2**2 / 2], [LN2, -LN2]),
    "k3": ([LN2 - 0.5, 1 - LN2], [0.5, -1.0]),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_estimator_value_and_gradient(kind):
    logp, ref = case([LN2, -LN2])
    kl = kl_penalty(logp, ref, kind=kind)
    close(kl, [EXPECTED[kind][0]])
    kl.sum().backward()
    close(logp.grad, [EXPECTED[kind][1]])


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_every_estimator_is_zero_when_the_policies_agree(kind):
    logp, ref = case([0.0, 0.0])
    close(kl_penalty(logp, ref, kind=kind), [[0.0, 0.0]])


def test_one_diverged_token_is_clamped_to_ten_in_k3_only_as_verl_does():
    # d = -15 (ref 15 nats more likely): k3 = exp(15) - 15 - 1 = 3269001.37 unclamped,
    # 10 clamped, with no gradient past the clamp (verl's low_var_kl). k1 = -15 and
    # k2 = 112.5 are not clamped (verl's "kl" and "mse" are not).
    logp, ref = case([-15.0])
    close(kl_penalty(logp, ref, kind="k3", clamp=None), [[math.exp(15) - 16]], 1e-3)
    kl = kl_penalty(logp, ref, kind="k3")
    close(kl, [[10.0]])
    kl.sum().backward()
    close(logp.grad, [[0.0]])
    close(kl_penalty(logp, ref, kind="k1"), [[-15.0]])
    close(kl_penalty(logp, ref, kind="k2"), [[112.5]])


@pytest.mark.parametrize(("d", "grad"), [(6.0, 6.0), (-6.0, -6.0)])
def test_k2_keeps_its_gradient_on_a_diverged_token(d, grad):
    # k2 = d^2 / 2 = 18 at |d| = 6, past the default clamp of 10 (reached at
    # |d| = sqrt(20) = 4.47): clamped, its gradient would be 0 on exactly the tokens
    # that diverged. d k2 / d logp = d = +-6.
    logp, ref = case([d])
    kl = kl_penalty(logp, ref, kind="k2")
    close(kl, [[18.0]])
    kl.sum().backward()
    close(logp.grad, [[grad]])


def test_the_k3_clamp_is_configurable():
    # k3 at d = -3: exp(3) - 3 - 1 = 16.0855; clamp 2 -> 2.
    logp, ref = case([-3.0])
    close(kl_penalty(logp, ref, kind="k3", clamp=2.0), [[2.0]])
    close(kl_penalty(logp, ref, kind="k3", clamp=None), [[math.exp(3) - 4]], 1e-6)


def test_the_reference_gets_no_gradient():
    logp, _ = case([LN2])
    ref = torch.zeros_like(logp).requires_grad_(True)
    kl_penalty(logp, ref, kind="k3").sum().backward()
    assert ref.grad is None


def test_an_unknown_kind_names_the_known_ones():
    logp, ref = case([0.0])
    with pytest.raises(ValueError, match="'k1', 'k2', 'k3'"):
        kl_penalty(logp, ref, kind="k4")


def test_adaptive_coefficient_moves_towards_the_target_by_at_most_twenty_percent():
    # target .1, horizon 10: kl .3 -> error clipped to .2 -> .1 * (1 + .2 / 10) = .102;
    # kl .05 -> error -.5 clipped to -.2 -> .098; kl .11 -> error .1 -> .101.
    close(adaptive_kl_coef(0.1, 0.3, target=0.1, horizon=10), 0.102)
    close(adaptive_kl_coef(0.1, 0.05, target=0.1, horizon=10), 0.098)
    close(adaptive_kl_coef(0.1, 0.11, target=0.1, horizon=10), 0.101)
    close(adaptive_kl_coef(0.1, 0.1, target=0.1, horizon=10), 0.1)


def test_adaptive_coefficient_counts_its_horizon_in_samples_as_verl_does():
    # verl's defaults: horizon 10000; 64 samples a step, KL at 10x its target for
    # 300 steps: e = clip(10 - 1, -.2, .2) = .2, each step x (1 + .2 * 64 / 10000)
    # = x 1.00128, 1.00128 ** 300 = 1.4678 (+47%).
    coef = 0.1
    for _ in range(300):
        coef = adaptive_kl_coef(coef, 1.0, target=0.1, horizon=10_000, n_steps=64)
    close(coef, 0.1 * 1.00128**300, 1e-9)
    close(coef / 0.1, 1.4678, 1e-4)


def test_adaptive_coefficient_rejects_a_bad_target():
    with pytest.raises(ValueError, match="target"):
        adaptive_kl_coef(0.1, 0.1, target=0.0, horizon=10)
