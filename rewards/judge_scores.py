"""Reading judges' scores: which judgements are usable, and how several judges'
scores combine (the coefficients that let an aggregate be split over steps). Pure:
reward components and the judges package both read it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from rewards.types import Judgement


def usable(j: Judgement) -> bool:
    return j.ok and j.score is not None and math.isfinite(j.score)


def sanitize(j: Judgement) -> Judgement:
    """An ``ok`` judgement with a non-finite or out-of-range score becomes a failure:
    a NaN must never reach the reward silently."""
    if not j.ok or (usable(j) and 0.0 <= (j.score or 0.0) <= 1.0):
        return j
    return replace(
        j, ok=False, score=None, error=f"judge returned an invalid score {j.score!r}"
    )


def coefficients(scores: Sequence[float], how: str) -> list[float]:
    """Weights c_i with ``aggregate == sum(c_i * s_i)``, so the aggregate can be split
    over the steps each judge names.

    >>> coefficients([0.2, 0.8, 0.5], "median")
    [0.0, 0.0, 1.0]
    >>> coefficients([0.2, 0.8, 0.5, 0.6], "median")
    [0.0, 0.0, 0.5, 0.5]
    >>> coefficients([0.2, 0.8], "min")
    [1.0, 0.0]
    """
    n = len(scores)
    out = [0.0] * n
    if n == 0:
        return out
    if how == "mean":
        return [1.0 / n] * n
    order = sorted(range(n), key=lambda i: scores[i])
    if how == "min":
        out[order[0]] = 1.0
    elif how == "median":
        mid = n // 2
        if n % 2:
            out[order[mid]] = 1.0
        else:
            out[order[mid - 1]] = out[order[mid]] = 0.5
    else:
        raise ValueError(f"unknown judge aggregate {how!r}")
    return out


def aggregate(judgements: Sequence[Judgement], how: str) -> float | None:
    """The aggregate of the usable judgements; None when every judge failed.

    >>> ok = Judgement("a", "rubric", True, 0.4, {}, "")
    >>> bad = Judgement("b", "hf", False, None, {}, "", raw="??", error="unparseable")
    >>> aggregate([ok, bad], "mean")
    0.4
    >>> aggregate([bad], "mean") is None
    True
    """
    scores = [float(j.score or 0.0) for j in judgements if usable(j)]
    if not scores:
        return None
    return sum(c * s for c, s in zip(coefficients(scores, how), scores, strict=True))


def disagreement(judgements: Sequence[Judgement]) -> float:
    """Spread (max - min) of the usable judges' scores; 0 with fewer than two."""
    scores = [float(j.score or 0.0) for j in judgements if usable(j)]
    return max(scores) - min(scores) if len(scores) > 1 else 0.0
