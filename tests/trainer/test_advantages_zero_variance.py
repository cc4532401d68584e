"""A group whose rollouts all got the same reward has advantage exactly 0 (issue 11,
item 5: the float32 mean of twelve rewards of 1.65 missed them by one ulp, 6e-8, and
the division by ``std + eps`` with eps = 1e-4 turned that into an advantage of ~1e-3)."""

from __future__ import annotations

import pytest
import torch

from trainer.algorithms import group_advantages


@pytest.mark.parametrize("std_scaling", ["group", "batch", "none"])
def test_a_group_that_scored_alike_has_advantage_exactly_zero(std_scaling):
    rewards = torch.tensor([1.65] * 12, dtype=torch.float32)
    assert torch.equal(
        group_advantages(rewards, 12, std_scaling=std_scaling), torch.zeros(12)
    )


@pytest.mark.parametrize("value", [0.05, 0.3, 0.7, 1.15, 1.65, 2.3, -0.35])
@pytest.mark.parametrize("group_size", [2, 3, 5, 8, 12, 16])
def test_equal_rewards_give_zero_for_any_value_and_group_size(value, group_size):
    rewards = torch.full((group_size,), value, dtype=torch.float32)
    assert group_advantages(rewards, group_size).abs().max().item() == 0.0


def test_the_other_groups_of_the_batch_are_unchanged():
    # Group 1 scored alike; group 2 is [0, 1]: mean 0.5, unbiased std sqrt(0.5) =
    # 0.70710678, so A = -+0.5 / (0.70710678 + 1e-4) = -+0.70700680.
    rewards = torch.tensor([1.65, 1.65, 0.0, 1.0], dtype=torch.float32)
    adv = group_advantages(rewards, 2)
    assert adv[:2].tolist() == [0.0, 0.0]
    assert adv[2:].tolist() == pytest.approx([-0.70700680, 0.70700680], abs=1e-6)
