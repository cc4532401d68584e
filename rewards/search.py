"""Recall-first search rewards (Chroma Context-1).

The searcher's job is to hand a downstream model the evidence: a document it never
surfaced cannot be recovered later, an irrelevant one can be ignored. Hence F-beta with
beta = 4 (recall weighted 16x precision) as the outcome, trajectory recall as a process
reward (against exiting after one search), and two penalties for the patterns Context-1
saw its policy learn: pruning one document at a time, and answering after one search.

Reads the search environment's facts: per step ``surfaced``, ``surfaced_gold``,
``pruned`` (tools ``search``, ``read``, ``prune``, ``answer``); per episode ``gold``,
``retained``, ``surfaced_all``, ``num_searches``, ``truncated``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rewards.components import NO_CONTEXT, Context, PerStep, on_last, register_component
from rewards.facts import as_count, as_set
from rewards.params import (
    FBetaParams,
    PrunePenaltyParams,
    SingleSearchExitParams,
    TrajectoryRecallParams,
)
from rewards.types import Episode

SEARCH = {"search"}


def fbeta(
    retrieved: Iterable[object], relevant: Iterable[object], *, beta: float = 4.0
) -> float:
    """F-beta of a retrieved set against the relevant set (duplicates ignored).

    ``(1 + b^2) tp / ((1 + b^2) tp + b^2 fn + fp)``, i.e. the weighted harmonic mean of
    precision and recall with recall ``beta^2`` times as important. Edge cases: nothing
    relevant and nothing retrieved is a perfect 1.0; nothing relevant but something
    retrieved is 0.0 (all of it is noise); something relevant and nothing retrieved is
    0.0.

    >>> round(fbeta({"a", "b", "c", "d"}, {"a", "b"}), 4)  # P = 0.5, R = 1: 34/36
    0.9444
    >>> round(fbeta({"a"}, {"a", "b"}), 4)  # P = 1, R = 0.5: 17/33
    0.5152
    >>> fbeta([], []), fbeta([], ["a"]), fbeta(["x"], [])
    (1.0, 0.0, 0.0)
    """
    if not (isinstance(beta, int | float) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    got, gold = set(retrieved), set(relevant)
    if not gold:
        return 1.0 if not got else 0.0
    tp = len(got & gold)
    if tp == 0:
        return 0.0
    b2 = beta * beta
    return (1 + b2) * tp / ((1 + b2) * tp + b2 * len(gold - got) + len(got - gold))


@register_component("fbeta", FBetaParams, envs={"search"})
def fbeta_reward(ep: Episode, p: FBetaParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """F-beta of the documents retained at the end against the gold set, on the last
    step (Context-1's outcome reward).

    >>> from rewards.synthetic import episode
    >>> ep = episode("search", [{}, {}], gold=["a", "b"], retained=["a", "x"])
    >>> [round(v, 4) for v in fbeta_reward(ep, FBetaParams(beta=1.0))]
    [0.0, 0.5]
    """
    value = fbeta(
        as_set(ep.facts.get("retained")), as_set(ep.facts.get("gold")), beta=p.beta
    )
    return on_last(ep, value)


@register_component("trajectory_recall", TrajectoryRecallParams, envs={"search"})
def trajectory_recall(
    ep: Episode, p: TrajectoryRecallParams, ctx: Context = NO_CONTEXT
) -> PerStep:
    """Share of gold documents surfaced at any point; the step that first surfaced a
    gold document earns ``1/|gold|`` for it. A process reward: exploring pays even if
    the document is pruned later (Context-1, against early exit). No gold: 0.

    >>> from rewards.synthetic import episode
    >>> ep = episode("search", [{"surfaced_gold": ["a"]}, {"surfaced": ["a", "x"]},
    ...                         {"surfaced": ["b", "c"]}], gold=["a", "b", "c", "d"])
    >>> trajectory_recall(ep, TrajectoryRecallParams())
    (0.25, 0.0, 0.5)
    """
    gold = as_set(ep.facts.get("gold"))
    if not ep.steps:
        return (0.0,)
    seen: set[str] = set()
    out = []
    for s in ep.steps:
        hit = (
            as_set(s.facts.get("surfaced_gold")) | as_set(s.facts.get("surfaced"))
        ) & gold
        new = hit - seen
        seen |= new
        out.append(len(new) / len(gold) if gold else 0.0)
    return tuple(out)


@register_component("prune_penalty", PrunePenaltyParams, envs={"search"})
def prune_penalty(
    ep: Episode, p: PrunePenaltyParams, ctx: Context = NO_CONTEXT
) -> PerStep:
    """``-penalty`` on every small prune (at most ``max_docs`` documents) beyond the
    first ``allowed`` ones: Context-1's policy learned to prune one document per turn,
    looking busy while wasting turns.

    >>> from rewards.synthetic import episode
    >>> ep = episode("search", [
    ...     {"tool": "search"}, {"tool": "prune", "pruned": ["d1"]},
    ...     {"tool": "prune", "pruned": ["d2"]},
    ...     {"tool": "prune", "pruned": ["d3", "d4"]},
    ...     {"tool": "prune", "pruned": ["d5"]}])
    >>> prune_penalty(ep, PrunePenaltyParams(penalty=0.1, max_docs=1, allowed=1))
    (0.0, 0.0, -0.1, 0.0, -0.1)
    """
    small = 0
    out = []
    for s in ep.steps:
        value = 0.0
        if s.tool == "prune" and s.ok and as_count(s.facts.get("pruned")) <= p.max_docs:
            small += 1
            value = -p.penalty if small > p.allowed else 0.0
        out.append(value)
    return tuple(out) or (0.0,)


def num_searches(ep: Episode) -> int:
    """The episode's ``num_searches`` fact, else its count of ok search steps."""
    if "num_searches" in ep.facts:
        return as_count(ep.facts["num_searches"])
    return sum(1 for s in ep.steps if s.ok and s.tool in SEARCH)


@register_component(
    "single_search_exit_penalty", SingleSearchExitParams, envs={"search"}
)
def single_search_exit_penalty(
    ep: Episode, p: SingleSearchExitParams, ctx: Context = NO_CONTEXT
) -> PerStep:
    """``-penalty`` on the last step of an episode the policy ended itself (not
    truncated) after fewer than ``min_searches`` searches (Context-1's single-search
    exit). Optionally waived when every gold document was surfaced anyway.

    >>> from rewards.synthetic import episode
    >>> ep = episode("search", [{"tool": "search"}, {"tool": "answer"}], truncated=False)
    >>> single_search_exit_penalty(ep, SingleSearchExitParams(penalty=0.2))
    (0.0, -0.2)
    """
    if ep.facts.get("truncated") or num_searches(ep) >= p.min_searches:
        return on_last(ep, 0.0)
    gold = as_set(ep.facts.get("gold"))
    if p.waive_on_full_recall and gold and gold <= as_set(ep.facts.get("surfaced_all")):
        return on_last(ep, 0.0)
    return on_last(ep, -p.penalty)


# One-at-a-time pruning (Chroma Context-1): an episode that pruned at least twice,
# at least this share of its prunes dropping a single document.
ONE_AT_A_TIME_MIN_PRUNES = 2
ONE_AT_A_TIME_SHARE = 0.8


def one_at_a_time(prunes: float, single_doc_prunes: float) -> float:
    """1.0 when an episode's prunes are repeated and nearly all of one document.

    >>> one_at_a_time(3, 3), one_at_a_time(1, 1), one_at_a_time(5, 2)
    (1.0, 0.0, 0.0)
    """
    if prunes < ONE_AT_A_TIME_MIN_PRUNES:
        return 0.0
    return float(single_doc_prunes / prunes >= ONE_AT_A_TIME_SHARE)


def search_metrics(ep: Episode) -> dict[str, float]:
    """Per-episode search behaviour (empty for non-search episodes): ``searches``,
    ``prunes``, ``single_doc_prunes``, ``one_at_a_time`` (:func:`one_at_a_time`) and
    ``single_search_exit`` (1.0 when the policy itself ended the episode after at
    most one search)."""
    if ep.env != "search" and "gold" not in ep.facts:
        return {}
    prunes = [s for s in ep.steps if s.ok and s.tool == "prune"]
    searches = num_searches(ep)
    single = sum(as_count(s.facts.get("pruned")) <= 1 for s in prunes)
    return {
        "searches": float(searches),
        "prunes": float(len(prunes)),
        "single_doc_prunes": float(single),
        "one_at_a_time": one_at_a_time(len(prunes), single),
        "single_search_exit": float(not ep.facts.get("truncated") and searches <= 1),
    }
