"""Recall-first search rewards (Context-1), worked by hand."""

from __future__ import annotations

import pytest

from rewards import fbeta
from rewards.params import (
    FBetaParams,
    PrunePenaltyParams,
    SingleSearchExitParams,
    TrajectoryRecallParams,
)
from rewards.search import (
    fbeta_reward,
    prune_penalty,
    search_metrics,
    single_search_exit_penalty,
    trajectory_recall,
)
from rewards.synthetic import episode


def test_it_weights_recall_sixteen_times_precision_at_beta_4():
    # tp=2, fp=2, fn=0: 17*2 / (17*2 + 16*0 + 2) = 34/36
    assert fbeta(["a", "b", "c", "d"], ["a", "b"]) == pytest.approx(34 / 36)
    # tp=1, fp=0, fn=1: 17 / (17 + 16 + 0) = 17/33
    assert fbeta(["a"], ["a", "b"]) == pytest.approx(17 / 33)


def test_it_matches_the_harmonic_mean_formula_at_beta_1():
    # P = 1/3, R = 1/2: 2PR / (P + R) = (1/3) / (5/6) = 0.4
    assert fbeta(["a", "x", "y"], ["a", "b"], beta=1.0) == pytest.approx(0.4)


def test_it_defines_fbeta_on_empty_sets():
    assert fbeta([], []) == 1.0
    assert fbeta([], ["a"]) == 0.0
    assert fbeta(["x"], []) == 0.0
    assert fbeta(["x"], ["a"]) == 0.0


def test_it_ignores_duplicate_documents():
    assert fbeta(["a", "a", "a"], ["a"]) == 1.0


@pytest.mark.parametrize("beta", [0, -1, float("nan"), float("inf")])
def test_it_rejects_a_bad_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        fbeta(["a"], ["a"], beta=beta)


def test_it_pays_fbeta_of_the_retained_documents_on_the_last_step():
    ep = episode("search", [{}, {}, {}], gold=["a", "b"], retained=["a", "b", "c", "d"])
    assert fbeta_reward(ep, FBetaParams()) == pytest.approx((0, 0, 34 / 36))


def test_it_credits_trajectory_recall_to_the_step_that_first_surfaced_each_gold_doc():
    ep = episode(
        "search",
        [
            {"tool": "search", "surfaced": ["x", "a"], "surfaced_gold": ["a"]},
            {"tool": "search", "surfaced": ["a", "b"], "surfaced_gold": ["a", "b"]},
            {"tool": "prune", "pruned": ["a"]},
            {"tool": "search", "surfaced_gold": ["a", "c", "not-gold"]},
        ],
        gold=["a", "b", "c", "d"],
    )
    assert trajectory_recall(ep, TrajectoryRecallParams()) == (0.25, 0.25, 0.0, 0.25)


def test_it_gives_no_trajectory_recall_without_gold_or_steps():
    ep = episode("search", [{"surfaced": ["a"]}], gold=[])
    assert trajectory_recall(ep, TrajectoryRecallParams()) == (0.0,)
    assert trajectory_recall(
        episode("search", [], gold=["a"]), TrajectoryRecallParams()
    ) == (0.0,)


def test_it_penalises_repeated_one_document_prunes_beyond_the_allowance():
    steps = [
        {"tool": "search"},
        {"tool": "prune", "pruned": ["d1"]},
        {"tool": "prune", "pruned": ["d2"]},
        {"tool": "prune", "pruned": ["d3", "d4"]},
        {"tool": "prune", "pruned": ["d5"], "ok": False},
        {"tool": "prune", "pruned": ["d6"]},
    ]
    got = prune_penalty(
        episode("search", steps), PrunePenaltyParams(penalty=0.1, allowed=1)
    )
    assert got == (0.0, 0.0, -0.1, 0.0, 0.0, -0.1)
    none_allowed = PrunePenaltyParams(penalty=0.1, allowed=0, max_docs=2)
    assert sum(prune_penalty(episode("search", steps), none_allowed)) == pytest.approx(
        -0.4
    )


def test_it_does_not_penalise_an_episode_without_prunes():
    assert prune_penalty(episode("search", []), PrunePenaltyParams()) == (0.0,)


def test_it_penalises_answering_after_a_single_search():
    steps = [{"tool": "search"}, {"tool": "answer"}]
    p = SingleSearchExitParams(penalty=0.2)
    assert single_search_exit_penalty(episode("search", steps), p) == (0.0, -0.2)
    twice = episode("search", steps, num_searches=2)
    assert single_search_exit_penalty(twice, p) == (0.0, 0.0)
    truncated = episode("search", steps, truncated=True)
    assert single_search_exit_penalty(truncated, p) == (0.0, 0.0)


def test_it_can_waive_the_single_search_penalty_on_full_recall():
    ep = episode("search", [{"tool": "search"}], gold=["a"], surfaced_all=["a", "b"])
    assert single_search_exit_penalty(ep, SingleSearchExitParams()) == (-0.2,)
    waive = SingleSearchExitParams(waive_on_full_recall=True)
    assert single_search_exit_penalty(ep, waive) == (0.0,)


def test_it_reports_search_behaviour_metrics():
    ep = episode(
        "search",
        [
            {"tool": "search"},
            {"tool": "prune", "pruned": ["a"]},
            {"tool": "prune", "pruned": ["b", "c"]},
        ],
        gold=["a"],
    )
    assert search_metrics(ep) == {
        "searches": 1.0,
        "prunes": 2.0,
        "single_doc_prunes": 1.0,
        "one_at_a_time": 0.0,  # two prunes, one of them of two documents
        "single_search_exit": 1.0,
    }
    assert search_metrics(episode("calc", [{}])) == {}
