"""Reward components for datasets: exact, numeric, regex and contains matches."""

from __future__ import annotations

import pytest

from rewards import RewardConfig, build_reward_fn, check_reward_config
from rewards.matching import contains, exact_match, numeric_match, regex_match
from rewards.params import (
    ContainsParams,
    ExactMatchParams,
    NumericMatchParams,
    RegexMatchParams,
)
from rewards.synthetic import episode


def _ep(answer, reference, steps=2):
    return episode(
        "dataset", [{}] * steps, answer=answer, reference=reference, success=False
    )


def test_exact_match_normalises_case_spaces_and_surrounding_punctuation():
    assert exact_match(_ep("  The  Cat.", "the cat"), ExactMatchParams()) == (0.0, 1.0)
    assert exact_match(
        _ep("The Cat.", "the cat"), ExactMatchParams(normalise=False)
    ) == (
        0.0,
        0.0,
    )
    assert exact_match(_ep(None, "the cat"), ExactMatchParams()) == (0.0, 0.0)


def test_numeric_match_reads_the_last_number_or_the_last_boxed_value():
    p = NumericMatchParams()
    assert numeric_match(_ep("3 + 4 = 7", "7"), p) == (0.0, 1.0)
    assert numeric_match(_ep("\\boxed{1,234} not 5", "#### 1234"), p) == (0.0, 1.0)
    assert numeric_match(_ep("7.01", "7"), p) == (0.0, 0.0)
    assert numeric_match(_ep("7.01", "7"), NumericMatchParams(abs_tol=0.02)) == (
        0.0,
        1.0,
    )
    assert numeric_match(_ep("no number", "7"), p) == (0.0, 0.0)


def test_regex_match_uses_the_pattern_or_the_reference_as_one():
    assert regex_match(_ep("id 42", "x"), RegexMatchParams(pattern=r"\d+")) == (
        0.0,
        1.0,
    )
    assert regex_match(
        _ep("id 42", "x"), RegexMatchParams(pattern=r"\d+", full=True)
    ) == (0.0, 0.0)
    assert regex_match(_ep("Yes", "yes|no"), RegexMatchParams(ignore_case=True)) == (
        0.0,
        1.0,
    )
    assert regex_match(_ep("a", "("), RegexMatchParams()) == (0.0, 0.0)  # bad pattern
    with pytest.raises(ValueError, match="not a valid regular expression"):
        RegexMatchParams(pattern="(")


def test_contains_finds_the_reference_in_the_answer():
    assert contains(_ep("It is PARIS.", "paris"), ContainsParams()) == (0.0, 1.0)
    assert contains(
        _ep("It is PARIS.", "paris"), ContainsParams(ignore_case=False)
    ) == (
        0.0,
        0.0,
    )


def test_match_components_are_weighted_and_attributed_to_the_answer_step():
    cfg = RewardConfig.model_validate(
        {
            "components": [
                {"name": "numeric_match", "weight": 2.0},
                {"name": "contains", "weight": 0.5},
            ]
        }
    )
    assert check_reward_config(cfg, "dataset") == []
    assert check_reward_config(cfg, "calc")[0].startswith("components.0.numeric_match")
    [res] = build_reward_fn(cfg, env_name="dataset")([_ep("so 12", "12", steps=3)], 0)
    assert res.breakdown.per_step == {
        "numeric_match": (0.0, 0.0, 2.0),
        "contains": (0.0, 0.0, 0.5),
    }
    assert res.breakdown.total == 2.5


def test_numeric_match_tool_credit_pays_the_call_that_computed_a_missed_answer():
    calc = {"tool": "calculator", "observation": "12"}
    p = NumericMatchParams(tool_credit=0.5)

    def ep(steps, answer):
        return episode("dataset", steps, answer=answer, reference="12")

    # Missed answer: the credit lands on the call whose result is the reference.
    assert numeric_match(
        ep([{"tool": "calculator", "observation": "3"}, calc, {}], "3"), p
    ) == (0.0, 0.5, 0.0)
    # A right answer is paid 1 on its step, never 1 + credit.
    assert numeric_match(ep([calc, {}], "12"), p) == (0.0, 1.0)
    # Once only, however often the call is repeated; never from a failed call or
    # from the answer step itself; off by default.
    assert numeric_match(ep([calc, calc, {}], None), p) == (0.5, 0.0, 0.0)
    failed = {"tool": "calculator", "ok": False, "observation": "12"}
    assert numeric_match(ep([failed, {}], "7"), p) == (0.0, 0.0)
    assert numeric_match(ep([calc, {}], "7"), NumericMatchParams()) == (0.0, 0.0)
