"""The arithmetic detectors judge a window of step summaries with: a key's series,
the means of the window's early and late halves, its least-squares trend, how many
standard errors apart two levels are, a rise to a limit, and the warm-up a fresh
policy is not judged in. Pure functions over plain mappings (``rewards.detectors``
and its siblings register the detectors that use them)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rewards.config import DetectorConfig
from rewards.start_levels import mean_se, start_level

Summary = Mapping[str, float]


def series(window: Sequence[Summary], key: str) -> list[float]:
    return [s[key] for s in window if key in s]


def halves(xs: Sequence[float]) -> tuple[float, float]:
    """Means of the early and the late half (the late half gets the odd one).

    >>> halves([4.0, 2.0, 1.0, 1.0, 1.0])
    (3.0, 1.0)
    """
    mid = len(xs) // 2
    early, late = xs[:mid] or xs, xs[mid:]
    return sum(early) / len(early), sum(late) / len(late)


def trend(xs: Sequence[float]) -> float:
    """How much a series rose across the window: its least-squares slope times its
    span (a steady climb counts whole, where the halves' means see half of it).

    >>> round(trend([0.0, 0.1, 0.2, 0.3]), 6), trend([1.0])
    (0.3, 0.0)
    """
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(xs) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (x - my) for i, x in enumerate(xs)) / sxx * (n - 1)


def tail(xs: Sequence[float], n: int = 10) -> list[float]:
    return [round(x, 4) for x in xs[-n:]]


def past_warmup(window: Sequence[Summary], cfg: DetectorConfig, name: str) -> bool:
    """The run is past ``<name>.after_windows`` windows: a state detector (not a change
    detector) does not judge a fresh policy by where it starts."""
    after = cfg.threshold(f"{name}.after_windows") * cfg.window
    return bool(window) and window[-1].get("step", 0) > after


def risen(
    window: Sequence[Summary],
    cfg: DetectorConfig,
    key: str,
    limit: float,
    rise: float,
    warmup: str | None = None,
) -> tuple[float, float, list[float]] | None:
    """``(early, late, series)`` of ``key`` when its late half is at least ``limit``
    and got there by rising ``rise`` across the window (a learned change, at any
    age: the late half's mean above the early half's, or the least-squares
    :func:`trend`, which counts a steady climb whole where the halves see half of
    it) or, with ``warmup`` (a detector's name), stays there past that detector's
    warm-up; else None."""
    xs = series(window, key)
    if not enough(cfg, xs):
        return None
    early, late = halves(xs)
    past = warmup is not None and past_warmup(window, cfg, warmup)
    climbed = max(late - early, trend(xs)) >= rise
    if late < limit or not (climbed or past):
        return None
    return early, late, xs


def enough(cfg: DetectorConfig, *xs: Sequence[float]) -> bool:
    return all(len(x) >= cfg.min_steps for x in xs)


def separation(xs: Sequence[float]) -> float:
    """How far the early half's mean is above the late half's, in standard errors of
    their difference (Welch's t; the halves as :func:`halves`
    splits them). Halves with no spread at all are as far apart as their means say:
    inf when they differ.

    >>> round(separation([7.5, 7.4, 5.7, 4.3, 4.5, 3.6]), 1)
    4.2
    >>> round(separation([10, 4.6, 2.9, 5.1, 2.6, 4.1, 4.9, 2.0]), 1)
    1.4
    """
    mid = len(xs) // 2
    if mid < 2:
        return 0.0
    m0, se0 = mean_se(xs[:mid])
    return below(xs[mid:], m0, se0 or 0.0)


def below(xs: Sequence[float], level: float, level_se: float = 0.0) -> float:
    """How far ``xs``'s mean is below ``level``, in standard errors of their
    difference (the late half of a window against the run's start level, known
    to ``level_se``). No spread at all: inf when below.

    >>> round(below([3.6, 3.5, 3.4, 3.5], 7.8), 1)
    105.3
    >>> round(below([3.6, 3.5, 3.4, 3.5], 7.8, level_se=1.5), 1)
    2.9
    """
    if len(xs) < 2:
        return 0.0
    m, se_m = mean_se(xs)
    se = ((se_m or 0.0) ** 2 + level_se**2) ** 0.5
    if se == 0:
        return math.inf if m < level else 0.0
    return (level - m) / se


# Standard errors that tell a change from step-to-step noise.
SEPARATION = 2.0


def learning(
    window: Sequence[Summary], cfg: DetectorConfig, name: str, *, holding: bool = False
) -> bool:
    """The run is learning its task: success's late half is at least
    ``<name>.min_success_gain`` above the run's start (``start/success``) and
    :data:`SEPARATION` standard errors above it (the start's own counted), and
    keeps at least half the gain the window's early half had: a solved task's dips
    (0.90 -> 0.72 from 0.05 at the start) still count as learning, a slide that
    loses more than half of it (0.9 -> 0.3) does not. With ``holding``, success must
    also not have fallen within the window by :data:`SEPARATION` standard errors
    (0.9 -> 0.5 is a slide whatever it kept). A policy that learns its task
    lengthens its episodes on the way (more sub-agents, more searches, more turns
    before the budget cuts one off) and sharpens its choices (its entropy falls):
    not drift, not collapse. False without success values or a start level.

    >>> cfg = DetectorConfig(window=8, min_steps=4)
    >>> w = [{"step": 60.0 + i, "success": s, "start/success": 0.05,
    ...       "start/success/se": 0.01} for i, s in enumerate([0.2, 0.3, 0.3, 0.4])]
    >>> learning(w, cfg, "length_drift"), learning(w[:2], cfg, "length_drift")
    (True, False)
    >>> fell = [{**s, "success": x} for s, x in zip(w, [0.9, 0.9, 0.3, 0.3])]
    >>> learning(fell, cfg, "length_drift")
    False
    >>> slid = [{**s, "success": x} for s, x in zip(w, [0.9, 0.88, 0.52, 0.5])]
    >>> (learning(slid, cfg, "length_drift"),
    ...  learning(slid, cfg, "length_drift", holding=True))
    (True, False)
    """
    succ, start = series(window, "success"), start_level(window, "success")
    if start is None or not enough(cfg, succ):
        return False
    early, _ = halves(succ)
    late, se_late = mean_se(succ[len(succ) // 2 :])
    se = math.hypot(se_late or 0.0, start_level(window, "success", "/se") or 0.0)
    above = (late - start) / se if se > 0 else (math.inf if late > start else 0.0)
    return (
        late - start >= cfg.threshold(f"{name}.min_success_gain")
        and above >= SEPARATION
        and late - start >= (early - start) / 2
        and not (holding and separation(succ) >= SEPARATION)
    )
