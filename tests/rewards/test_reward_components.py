"""Generic components, worked by hand: outcome, process, format, judge."""

from __future__ import annotations

import math

import pytest

from rewards.components import (
    COMPONENTS,
    Context,
    format_reward,
    judge,
    outcome,
    process,
)
from rewards.params import FormatParams, JudgeParams, OutcomeParams, ProcessParams
from rewards.synthetic import episode
from rewards.types import Judgement


def j(
    name: str, score: float | None, *, ok: bool = True, step: int | None = None
) -> Judgement:
    return Judgement(name, "rubric", ok, score, {}, "", target_step=step)


def test_it_pays_outcome_on_the_last_step_only():
    assert outcome(episode("calc", [{}, {}, {}], success=True), OutcomeParams()) == (
        0,
        0,
        1,
    )
    assert outcome(episode("calc", [{}, {}], success=False), OutcomeParams()) == (0, 0)


def test_it_gives_partial_credit_only_when_asked_and_clips_it():
    ep = episode("calc", [{}], success=False, partial=0.25)
    assert outcome(ep, OutcomeParams()) == (0.0,)
    assert outcome(ep, OutcomeParams(partial_credit=True)) == (0.25,)
    over = episode("calc", [{}], partial=3.0)
    assert outcome(over, OutcomeParams(partial_credit=True)) == (1.0,)
    nan = episode("calc", [{}], partial=float("nan"))
    assert outcome(nan, OutcomeParams(partial_credit=True)) == (0.0,)


def test_it_treats_a_truthy_non_bool_success_as_failure():
    # Facts are JSON; only a literal true is a success ("yes" is not).
    assert outcome(episode("calc", [{}], success="yes"), OutcomeParams()) == (0.0,)


def test_it_lands_outcome_on_a_pseudo_step_when_there_are_no_steps():
    assert outcome(episode("calc", [], success=True), OutcomeParams()) == (1.0,)


def test_it_sums_process_rewards_per_step():
    ep = episode(
        "calc",
        [
            {"reward": 0.2},
            {"reward": 0.3},
            {"reward": 0.5, "ok": False},
            {"reward": "x"},
        ],
    )
    got = process(ep, ProcessParams(malformed=-0.1))
    assert got == pytest.approx((0.2, 0.3, 0.4, 0.0))
    assert sum(got) == pytest.approx(0.9)


def test_it_counts_list_facts_in_process_rewards():
    ep = episode(
        "swarm", [{"newly_completed": ["a", "b"]}, {}, {"newly_completed": ["c"]}]
    )
    assert process(ep, ProcessParams(key="newly_completed", scale=0.5)) == (
        1.0,
        0.0,
        0.5,
    )


def test_it_gives_process_zero_on_an_empty_episode():
    assert process(episode("calc", []), ProcessParams()) == (0.0,)


def test_it_pays_format_as_the_share_of_ok_steps():
    ep = episode("calc", [{"ok": True}, {"ok": False}, {"ok": True}, {"tool": None}])
    assert format_reward(ep, FormatParams(scale=0.1)) == pytest.approx(
        (0.025, 0, 0.025, 0)
    )
    assert format_reward(episode("calc", []), FormatParams()) == (0.0,)


def test_it_averages_judges_onto_the_steps_they_name():
    ep = episode("calc", [{}, {}, {}])
    ctx = Context(judgements=(j("a", 0.9, step=0), j("b", 0.3), j("c", 0.6, step=1)))
    got = judge(ep, JudgeParams(), ctx)
    assert got == pytest.approx((0.3, 0.2, 0.1))
    assert sum(got) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("how", "want"), [("min", 0.3), ("median", 0.6), ("mean", 0.6)]
)
def test_it_aggregates_judges_by_min_median_or_mean(how, want):
    ctx = Context(
        judgements=(j("a", 0.9), j("b", 0.3), j("c", 0.6)), judge_aggregate=how
    )
    assert sum(judge(episode("calc", [{}]), JudgeParams(), ctx)) == pytest.approx(want)


def test_it_leaves_failed_and_nan_judges_out_of_the_aggregate():
    ctx = Context(
        judgements=(j("a", 0.8), j("b", None, ok=False), j("c", math.nan), j("d", 0.4))
    )
    assert judge(episode("calc", [{}]), JudgeParams(), ctx) == pytest.approx((0.6,))


def test_it_gives_zero_when_every_judge_failed():
    ctx = Context(judgements=(j("a", None, ok=False),))
    assert judge(episode("calc", [{}, {}]), JudgeParams(), ctx) == (0.0, 0.0)


def test_it_uses_only_the_judges_a_component_names():
    ctx = Context(judgements=(j("a", 1.0), j("b", 0.0)))
    assert judge(episode("calc", [{}]), JudgeParams(judges=["a"]), ctx) == (1.0,)


def test_it_puts_a_judge_naming_a_step_out_of_range_on_the_last_step():
    ctx = Context(judgements=(j("a", 0.5, step=7),))
    assert judge(episode("calc", [{}, {}]), JudgeParams(), ctx) == (0.0, 0.5)


def test_it_registers_every_component_with_a_docstring_example():
    for name in COMPONENTS:
        assert ">>>" in COMPONENTS.get(name).doc, name
