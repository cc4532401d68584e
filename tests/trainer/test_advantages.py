"""Advantage estimators, checked against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms import (
    gae_advantages,
    group_advantages,
    process_advantages,
    zero_variance_groups,
)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float64),
        torch.as_tensor(expected, dtype=torch.float64),
        atol=tol,
        rtol=0,
    )


# --- group_advantages -------------------------------------------------------------


def test_it_scales_by_group_std():
    # [1, 0, 0, 0]: mean .25, deviations [.75, -.25, -.25, -.25],
    # unbiased var = (.5625 + 3 * .0625) / 3 = .25, std .5 -> [1.5, -.5, -.5, -.5].
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, eps=0.0)
    close(adv, [1.5, -0.5, -0.5, -0.5])


def test_it_adds_eps_to_the_std():
    # Same group with the default eps: deviations / (.5 + 1e-4).
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    close(adv, [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001])


def test_it_normalises_each_group_separately():
    # Group [0, 0]: mean 0, std 0 -> 0 / (0 + eps) = 0.
    # Group [0, 2]: mean 1, deviations [-1, 1], var (1 + 1) / 1 = 2, std sqrt(2).
    eps = 1e-4
    adv = group_advantages(torch.tensor([0.0, 0.0, 0.0, 2.0]), 2, eps=eps)
    s = math.sqrt(2) + eps
    close(adv, [0.0, 0.0, -1 / s, 1 / s])


def test_it_scales_by_batch_std():
    # Group means 0 and 1 -> centred [0, 0, -1, 1].
    # Batch [0, 0, 0, 2]: mean .5, deviations [-.5, -.5, -.5, 1.5],
    # var = (3 * .25 + 2.25) / 3 = 1, std 1 -> [0, 0, -1, 1] / (1 + eps).
    eps = 1e-4
    adv = group_advantages(
        torch.tensor([0.0, 0.0, 0.0, 2.0]), 2, std_scaling="batch", eps=eps
    )
    close(adv, [0.0, 0.0, -1 / (1 + eps), 1 / (1 + eps)])


def test_it_only_centres_without_std_scaling():
    # Dr. GRPO: [1, 0, 0, 0] - .25 and [3, 5] - 4, no division.
    adv = group_advantages(
        torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0, 5.0, 4.0, 4.0]), 4, std_scaling="none"
    )
    close(adv, [0.75, -0.25, -0.25, -0.25, -1.0, 1.0, 0.0, 0.0])


def test_a_zero_variance_group_gets_zero_advantage_not_nan():
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0]), 3)
    close(adv, [0.0, 0.0, 0.0])


def test_it_accepts_integer_rewards():
    adv = group_advantages(torch.tensor([1, 0]), 2, std_scaling="none")
    assert adv.is_floating_point()
    close(adv, [0.5, -0.5])


def test_it_rejects_a_batch_not_divisible_by_the_group_size():
    with pytest.raises(ValueError, match="divisible"):
        group_advantages(torch.zeros(5), 2)


def test_it_rejects_a_group_size_of_one():
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(4), 1)


def test_it_rejects_an_unknown_std_scaling_naming_the_allowed_values():
    with pytest.raises(ValueError, match="'group', 'batch', 'none'"):
        group_advantages(torch.zeros(4), 2, std_scaling="max")


# --- zero_variance_groups ---------------------------------------------------------


def test_it_flags_groups_whose_rewards_are_all_equal():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert zero_variance_groups(rewards, 4).tolist() == [True, False]


def test_it_flags_groups_within_the_tolerance():
    rewards = torch.tensor([0.5, 0.5 + 1e-7, 0.5, 0.6])
    assert zero_variance_groups(rewards, 2).tolist() == [True, False]
    # max - min = .1 <= .2
    assert zero_variance_groups(rewards, 2, tol=0.2).tolist() == [True, True]


def test_zero_variance_detection_returns_one_bool_per_group():
    flags = zero_variance_groups(torch.zeros(6), 3)
    assert flags.dtype == torch.bool
    assert flags.shape == (2,)


def test_zero_variance_detection_rejects_a_ragged_batch():
    with pytest.raises(ValueError, match="divisible"):
        zero_variance_groups(torch.zeros(5), 2)


# --- gae_advantages ---------------------------------------------------------------

REWARDS = torch.tensor([1.0, 0.0, 2.0])


def test_gae_on_a_terminal_trajectory():
    # gamma .9, lam .5 (gamma * lam = .45), V = [.5, 1, 1.5], terminal -> V_3 = 0.
    # delta_2 = 2 + .9 * 0   - 1.5 = .5
    # delta_1 = 0 + .9 * 1.5 - 1.0 = .35
    # delta_0 = 1 + .9 * 1.0 - 0.5 = 1.4
    # A_2 = .5; A_1 = .35 + .45 * .5 = .575; A_0 = 1.4 + .45 * .575 = 1.65875
    # returns = A + V[:-1] = [2.15875, 1.575, 2.0]
    values = torch.tensor([0.5, 1.0, 1.5, 0.0])
    adv, ret = gae_advantages(REWARDS, values, gamma=0.9, lam=0.5)
    close(adv, [1.65875, 0.575, 0.5])
    close(ret, [2.15875, 1.575, 2.0])


def test_gae_bootstraps_a_truncated_trajectory_from_the_last_value():
    # Same, but truncated with V_3 = 2: delta_2 = 2 + .9 * 2 - 1.5 = 2.3
    # A_2 = 2.3; A_1 = .35 + .45 * 2.3 = 1.385; A_0 = 1.4 + .45 * 1.385 = 2.02325
    # returns = [2.52325, 2.385, 3.8]
    values = torch.tensor([0.5, 1.0, 1.5, 2.0])
    adv, ret = gae_advantages(REWARDS, values, gamma=0.9, lam=0.5)
    close(adv, [2.02325, 1.385, 2.3])
    close(ret, [2.52325, 2.385, 3.8])


def test_gae_with_lambda_one_is_the_monte_carlo_return_minus_the_baseline():
    # gamma = lam = 1, terminal: returns are reward-to-go [3, 2, 2].
    values = torch.tensor([0.5, 1.0, 1.5, 0.0])
    adv, ret = gae_advantages(REWARDS, values, gamma=1.0, lam=1.0)
    close(ret, [3.0, 2.0, 2.0])
    close(adv, [2.5, 1.0, 0.5])


def test_gae_with_lambda_zero_is_the_td_error():
    values = torch.tensor([0.5, 1.0, 1.5, 0.0])
    adv, _ = gae_advantages(REWARDS, values, gamma=0.9, lam=0.0)
    close(adv, [1.4, 0.35, 0.5])


def test_gae_handles_a_batch_of_trajectories_like_single_ones():
    values = torch.tensor([[0.5, 1.0, 1.5, 0.0], [0.5, 1.0, 1.5, 2.0]])
    adv, _ = gae_advantages(REWARDS.expand(2, 3), values, gamma=0.9, lam=0.5)
    close(adv, [[1.65875, 0.575, 0.5], [2.02325, 1.385, 2.3]])


def test_gae_does_not_differentiate_through_the_values():
    values = torch.tensor([0.5, 1.0, 1.5, 0.0], requires_grad=True)
    adv, ret = gae_advantages(REWARDS, values, gamma=0.9, lam=0.5)
    assert not adv.requires_grad and not ret.requires_grad


def test_gae_rejects_values_without_the_bootstrap_entry():
    with pytest.raises(ValueError, match="T\\+1"):
        gae_advantages(REWARDS, torch.zeros(3), gamma=1.0, lam=1.0)


# --- process_advantages -----------------------------------------------------------

STEP_REWARDS = [[1.0, 3.0], [2.0], [0.0, 2.0], [4.0]]  # two groups of two


def test_process_advantages_normalise_within_the_group_and_sum_later_steps():
    # Group 1 step rewards {1, 3, 2}: mean 2, deviations [-1, 1, 0], var 2 / 2 = 1.
    #   t0: r~ = [-1, 1] / (1 + eps) -> A = [0, 1] / (1 + eps);  t1: [0]
    # Group 2 step rewards {0, 2, 4}: mean 2, deviations [-2, 0, 2], var 8 / 2 = 4.
    #   t2: r~ = [-2, 0] / (2 + eps) -> A = [-2, 0] / (2 + eps); t3: [2 / (2 + eps)]
    eps = 1e-4
    out = process_advantages(STEP_REWARDS, 2, eps=eps)
    assert [len(t) for t in out] == [2, 1, 2, 1]
    close(out[0], [0.0, 1 / (1 + eps)])
    close(out[1], [0.0])
    close(out[2], [-2 / (2 + eps), 0.0])
    close(out[3], [2 / (2 + eps)])


def test_process_advantages_sum_every_later_step():
    # One trajectory [1, 2, 3] (group size 1): mean 2, std 1 -> r~ = [-1, 0, 1];
    # A = [-1 + 0 + 1, 0 + 1, 1] = [0, 1, 1] (eps = 0 for round numbers).
    out = process_advantages([[1.0, 2.0, 3.0]], 1, eps=0.0)
    close(out[0], [0.0, 1.0, 1.0])


def test_process_advantages_can_scale_by_the_batch_std():
    # All step rewards {1, 3, 2, 0, 2, 4}: mean 2, squared deviations
    # 1 + 1 + 0 + 4 + 0 + 4 = 10, var 10 / 5 = 2, std sqrt(2); means stay per group.
    s = math.sqrt(2)
    out = process_advantages(STEP_REWARDS, 2, std_scaling="batch", eps=0.0)
    close(out[0], [0.0, 1 / s])
    close(out[2], [-2 / s, 0.0])
    close(out[3], [2 / s])


def test_process_advantages_without_std_scaling_only_centre():
    out = process_advantages(STEP_REWARDS, 2, std_scaling="none")
    assert out == [[0.0, 1.0], [0.0], [-2.0, 0.0], [2.0]]


def test_a_group_with_a_single_step_reward_has_zero_std():
    # One step reward overall: mean 5, std 0 -> (5 - 5) / (0 + eps) = 0.
    assert process_advantages([[5.0], []], 2) == [[0.0], []]


def test_process_advantages_reject_a_ragged_batch_and_unknown_scaling():
    with pytest.raises(ValueError, match="divisible"):
        process_advantages([[1.0], [2.0], [3.0]], 2)
    with pytest.raises(ValueError, match="std_scaling"):
        process_advantages([[1.0], [2.0]], 2, std_scaling="max")
