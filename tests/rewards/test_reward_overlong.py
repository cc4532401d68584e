"""DAPO's overlong penalty: values at the boundaries, the step it lands on, wiring."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rewards import RewardConfig, build_reward_fn, with_overlong_penalty
from rewards.components import overlong_penalty, overlong_value
from rewards.params import OverlongParams
from rewards.synthetic import episode
from trainer.config import TrainConfig
from trainer.runner import reward_config_for

P = OverlongParams(max_len=20, cache=4)  # soft zone 16 < L <= 20


@pytest.mark.parametrize(
    "length, want",
    [
        (0, 0.0),
        (16, 0.0),  # max_len - cache: still free
        (17, -0.25),  # (16 - 17) / 4
        (18, -0.5),
        (20, -1.0),  # max_len
        (21, -1.0),  # beyond
        (500, -1.0),
    ],
)
def test_the_penalty_at_and_around_the_boundaries(length, want):
    assert overlong_value(length, P.max_len, P.cache) == pytest.approx(want)


def test_a_zero_cache_is_a_hard_cliff_at_max_len():
    assert overlong_value(20, 20, 0) == 0.0
    assert overlong_value(21, 20, 0) == -1.0


def test_it_lands_on_the_step_that_made_the_trajectory_long():
    # Running totals 6, 14, 18, 19: step 2 crosses 16; total 19 -> (16 - 19) / 4.
    ep = episode("calc", [{}, {}, {}, {}], action_tokens=[6, 8, 4, 1])
    assert overlong_penalty(ep, P) == (0.0, 0.0, -0.75, 0.0)


def test_a_short_trajectory_pays_nothing_and_missing_counts_are_zero():
    assert overlong_penalty(episode("calc", [{}, {}], action_tokens=[8, 8]), P) == (
        0.0,
        0.0,
    )
    assert overlong_penalty(episode("calc", [{}]), P) == (0.0,)


def test_cache_larger_than_max_len_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="cache"):
        OverlongParams(max_len=4, cache=5)


def test_the_component_is_in_the_registry_and_the_schema():
    cfg = RewardConfig.model_validate(
        {
            "components": [
                {"name": "outcome"},
                {"name": "overlong_penalty", "params": {"max_len": 20, "cache": 4}},
            ]
        }
    )
    ep = episode("calc", [{}, {}], success=True, action_tokens=[10, 8])
    (r,) = build_reward_fn(cfg, env_name="calc")([ep], 1)
    assert r.breakdown.per_step["overlong_penalty"] == (0.0, -0.5)
    assert r.breakdown.total == pytest.approx(0.5)


def test_dapo_adds_the_penalty_sized_to_the_generation_budget():
    # 3 turns x 10 tokens = 30 generated tokens at most; cache 30 // 5 = 6.
    rollout = {"max_turns": 3, "max_action_tokens": 10}
    dapo = TrainConfig.model_validate(
        {"algorithm": {"preset": "dapo"}, "rollout": rollout}
    )
    comps = {c.name: c for c in reward_config_for(dapo).components}
    assert comps["overlong_penalty"].params == OverlongParams(max_len=30, cache=6)
    grpo = TrainConfig.model_validate({"rollout": rollout})
    assert "overlong_penalty" not in {
        c.name for c in reward_config_for(grpo).components
    }
    off = TrainConfig.model_validate(
        {"algorithm": {"preset": "dapo", "overlong_shaping": False}}
    )
    assert "overlong_penalty" not in {c.name for c in reward_config_for(off).components}


def test_an_explicit_penalty_is_kept_as_given():
    cfg = RewardConfig.model_validate(
        {
            "components": [
                {"name": "overlong_penalty", "params": {"max_len": 9, "cache": 2}}
            ]
        }
    )
    assert with_overlong_penalty(cfg, 30) is cfg
