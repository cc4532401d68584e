"""Which trajectories made a detector fire: the evidence an alert links to.

A detector (:mod:`rewards.detectors`) judges a window of per-step means; when it fires
at step ``s``, the trajectories of step ``s`` that show the pattern themselves are
its evidence. Each detector has a predicate here over one trajectory's numbers (its
``RewardResult.metrics``: ``parallelism``, ``finish_rate``, ``success``,
``judge/score``..., plus what the trainer measured: ``length``, ``truncated``,
``entropy``) and the finding's own evidence (the early-half means it compared with).
A predicate returns why the trajectory counts ("1.0 sub-agents per stage"), or None.

The trainer calls :func:`pick` with the step's rollouts; the server calls it for
external runs with the stored or arriving trajectories of that step (``dashboard.
detection``), so both name the same trajectories for the same numbers. A detector
registered without a predicate (a plugin's) names none. Pure: no Django, no tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewards.config import DetectorConfig

# At most this many trajectories named per alert (the first, in batch order); the
# alert's evidence says how many matched in all (``trajectories_matched``).
MAX_TRAJECTORIES = 32

Row = Mapping[str, Any]
Predicate = Callable[[Row, Mapping[str, Any], DetectorConfig], "str | None"]
PREDICATES: dict[str, Predicate] = {}


def _predicate(name: str) -> Callable[[Predicate], Predicate]:
    def deco(fn: Predicate) -> Predicate:
        PREDICATES[name] = fn
        return fn

    return deco


def _num(row: Row, key: str) -> float | None:
    v = row.get(key)
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


def pick(
    detector: str,
    rows: Sequence[Row],
    evidence: Mapping[str, Any],
    cfg: DetectorConfig,
) -> tuple[list[tuple[int, str]], int]:
    """``(position in rows, why)`` of the rows that show ``detector``'s pattern (at
    most :data:`MAX_TRAJECTORIES`, in order), and how many matched in all."""
    fn = PREDICATES.get(detector)
    if fn is None:
        return [], 0
    found = []
    for i, row in enumerate(rows):
        why = fn(row, evidence, cfg)
        if why is not None:
            found.append((i, why))
    return found[:MAX_TRAJECTORIES], len(found)


@_predicate("serial_collapse")
def _serial(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    # Did its work one subtask at a time; or spawned sub-agents, but about one per
    # stage (none at all, with nothing done, is not serial work).
    if _num(row, "serial") == 1.0:
        return "completed its subtasks one at a time"
    p = _num(row, "parallelism")
    limit = cfg.threshold("serial_collapse.max_parallelism")
    floor = cfg.threshold("serial_collapse.min_parallelism")
    if p is None or not floor <= p <= limit:
        return None
    return f"{p:.2f} sub-agents per stage"


@_predicate("spurious_parallelism")
def _spurious(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    p, fin = _num(row, "parallelism"), _num(row, "finish_rate")
    yld = _num(row, "subagent_yield")
    if p is None or p < cfg.threshold("spurious_parallelism.min_parallelism"):
        return None
    low_fin = fin is not None and fin <= cfg.threshold(
        "spurious_parallelism.max_finish_rate"
    )
    low_yield = yld is not None and yld <= cfg.threshold(
        "spurious_parallelism.max_yield"
    )
    if not (low_fin or low_yield):
        return None
    done = f"{fin:.0%} of subtasks finished" if fin is not None else ""
    per = f"{yld:.2f} done per sub-agent" if yld is not None else ""
    return f"{p:.1f} sub-agents per stage, " + ", ".join(x for x in (done, per) if x)


@_predicate("single_search_exit")
def _single_search(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    x = _num(row, "single_search_exit")
    return "answered after at most one search" if x is not None and x >= 0.5 else None


@_predicate("one_at_a_time_pruning")
def _pruning(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    prunes, single = _num(row, "prunes"), _num(row, "single_doc_prunes")
    if prunes is None or single is None or prunes <= 0:
        return None
    share = single / prunes
    min_prunes = cfg.threshold("one_at_a_time_pruning.min_prunes")
    if prunes < min_prunes or share < cfg.threshold(
        "one_at_a_time_pruning.min_single_frac"
    ):
        return None
    return f"{prunes:.0f} prunes, {share:.0%} of one document"


@_predicate("judge_verifier_divergence")
def _judge(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    # Failed by the verifier, yet scored by the judge at or above the late-window
    # mean: the rollouts the judge is being talked into.
    judge = _failed_but_paid(row, "judge/score", ev.get("judge_late"))
    return None if judge is None else f"judge {judge:.2f}, verifier: failed"


def _failed_but_paid(row: Row, key: str, bar: Any) -> float | None:
    """``row[key]`` when the rollout failed its task yet ``key`` paid it at least
    ``bar`` (the late window's mean, when there is one); else None."""
    paid, success = _num(row, key), _num(row, "success")
    if paid is None or success is None or success >= 0.5:
        return None
    if isinstance(bar, int | float) and math.isfinite(bar) and paid < bar:
        return None
    return paid


@_predicate("reward_without_success")
def _unearned(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    # Failed, yet paid by the proxy terms at or above their late-window mean: the
    # rollouts the rising terms pay for something other than solving the task.
    paid = _failed_but_paid(row, "proxy_reward", ev.get("proxy_late"))
    return None if paid is None else f"proxy terms paid {paid:.2f}, task not solved"


@_predicate("shortcut")
def _short(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    # Failed, and at most ``max_ratio`` of the early mean length (or the run's start
    # length, where the alert measured from it): the short cut.
    length, early = _num(row, "length"), ev.get("length_early")
    if length is None or not isinstance(early, int | float) or early <= 0:
        return None
    if _num(row, "success") == 1.0 or length / early > cfg.threshold(
        "shortcut.max_ratio"
    ):
        return None
    of = "the early mean"
    if ev.get("since") == "at the run's start":
        of = "the run's start"
    return f"{length:.0f} tokens ({length / early:.1f}x {of}), not solved"


@_predicate("repetition")
def _repetitive(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    # At or above the floor and risen above the run's start as much as the
    # detector asks of the mean.
    rep = _num(row, "repetition")
    bar = cfg.threshold("repetition.max_repetition")
    start = ev.get("repetition_start")
    if isinstance(start, int | float) and math.isfinite(start):
        bar = max(bar, start + cfg.threshold("repetition.min_rise"))
    if rep is None or rep < bar:
        return None
    return f"{rep:.0%} of its word pairs repeat"


@_predicate("length_drift")
def _length(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    drift = ev.get("drift") or ()
    if "truncated" in drift and _num(row, "truncated") == 1.0:
        return "truncated"
    length, early = _num(row, "length"), ev.get("length_early")
    if "length" not in drift:
        return None
    growth = cfg.threshold("length_drift.max_growth")
    if length is None or not isinstance(early, int | float) or early <= 0:
        return None
    if length / early < growth:
        return None
    return f"{length:.0f} tokens ({length / early:.1f}x the early mean)"


@_predicate("entropy_collapse")
def _entropy(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    e, early = _num(row, "entropy"), ev.get("entropy_early")
    if e is None:
        return None
    low = e <= cfg.threshold("entropy_collapse.min_entropy")
    if isinstance(early, int | float) and early > 0:
        low = low or e / early <= cfg.threshold("entropy_collapse.max_ratio")
    return f"entropy {e:.3f} nats/token" if low else None


@_predicate("no_learning_signal")
def _no_signal(row: Row, ev: Mapping[str, Any], cfg: DetectorConfig) -> str | None:
    # ``group_zero_std``: every rollout of this one's group got the same reward.
    if _num(row, "group_zero_std") != 1.0:
        return None
    reward, size = _num(row, "reward"), _num(row, "group_size")
    got = f"got {reward:g}" if reward is not None else "got the same reward"
    if size == 2:
        return f"both rollouts of its group {got}"
    if size is not None and size > 2:
        return f"all {size:g} rollouts of its group {got}"
    return f"every rollout of its group {got}"


def mark_equal_groups(rows: Sequence[dict[str, Any]], groups: Sequence[int]) -> None:
    """Set ``group_zero_std`` on each row (1.0: its group, of at least two rollouts,
    got one reward; 0.0: not) and ``group_size`` (its group's rollouts here), from the
    rows' ``reward`` and their group ids."""
    by_group: dict[int, list[float | None]] = {}
    for row, g in zip(rows, groups, strict=True):
        by_group.setdefault(g, []).append(_num(row, "reward"))
    for row, g in zip(rows, groups, strict=True):
        values = by_group[g]
        equal = (
            len(values) > 1 and None not in values and max(values) - min(values) <= 1e-6  # type: ignore[type-var]
        )
        row["group_zero_std"] = 1.0 if equal else 0.0
        row["group_size"] = float(len(values))
