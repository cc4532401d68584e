"""The what-if report: old vs new weighting over a run's stored rollouts.

Counts per training step and in total (trajectories whose advantage changes sign:
reversed, to exactly 0 or from 0, each counted apart; the share of trained tokens
whose advantage changes sign, groups whose best rollout changes,
Kendall's tau between old and new totals within groups, groups that gain or lose their
signal), and the most telling examples of each kind of change. The math is in
:mod:`trainer.whatif`; this module only compares and counts. Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import Any

import numpy as np

from trainer.algorithms import ResolvedAlgorithm
from trainer.whatif import (
    KINDS,
    Reweighed,
    StoredRollout,
    Weighting,
    _trained,
    best_of,
    dumps_missing,
    kendall_tau_b,
    reweigh_matrix,
    sign,
    step_advantages,
    step_factors,
    stored_matrix,
)

# What a report counts of the advantages (None where they cannot be computed) ...
_ADVANTAGE_COUNTS = (
    "trajectories",
    "sign_flips",
    # sign_flips split: + to - or - to + ("reversed"), to exactly 0 (its push goes)
    # and from 0 (a push appears); the three add up to sign_flips.
    "sign_reversed",
    "sign_to_zero",
    "sign_from_zero",
    "tokens",
    "token_flips",
)
# ... and of the groups.
_COUNTS = (
    *_ADVANTAGE_COUNTS,
    "groups",
    "best_changes",
    "rank_changes",
    "signal_lost",
    "signal_gained",
)


def compare(
    rows: Sequence[StoredRollout],
    old: Weighting,
    new: Weighting,
    algo: ResolvedAlgorithm,
    group_size: int,
    *,
    examples: int = 5,
) -> dict[str, Any]:
    """The report for ``rows`` (any order) under ``new`` against the run's ``old``.

    Only whole groups (``group_size`` rows) count; others are reported as skipped.
    """
    G = group_size
    missing: dict[str, set[int]] = {}
    fixed: set[str] = set()
    found: dict[str, list[tuple[float, dict[str, Any]]]] = {k: [] for k in KINDS}
    per_step: list[dict[str, Any]] = []
    # (step slot, the group's best rollout now as an example, old totals, new totals)
    pairs: list[tuple[int, dict[str, Any], list[float], list[float]]] = []
    skipped = 0
    ordered = sorted(rows, key=lambda r: (r.step, r.group, r.index))
    for step, in_step in groupby(ordered, key=lambda r: r.step):
        whole: list[StoredRollout] = []
        for _, members in groupby(in_step, key=lambda r: r.group):
            grp = list(members)
            if len(grp) == G:
                whole.extend(grp)
            else:
                skipped += 1
        if not whole:
            continue
        same = dict.fromkeys(old.weights, 1.0)
        factors = step_factors(old, new, step)
        stored = stored_matrix(whole)
        before = reweigh_matrix(stored, same, {}, set())
        after = reweigh_matrix(stored, factors, missing, fixed, new.added_at(old, step))
        counts = _step_counts(whole, before, after, algo, G, found)
        counts["step"] = step
        for g in range(len(whole) // G):
            sl = slice(g * G, (g + 1) * G)
            olds, news = [s.total for s in before[sl]], [s.total for s in after[sl]]
            b = g * G + best_of(news)
            ex = _example(whole[b], before[b], after[b])
            pairs.append((len(per_step), ex, olds, news))
        per_step.append(counts)
    _rank_changes(pairs, per_step, found)
    advantages = algo.credit != "gae"
    total = {k: sum(s[k] for s in per_step) for k in (*_COUNTS, "tau_sum")}
    total["tau_groups"] = sum(s["tau_groups"] for s in per_step)
    for s in [*per_step, total]:
        _finish(s, advantages)
    return {
        "credit": algo.credit,
        "preset": algo.preset,
        "group_size": G,
        "steps": per_step,
        "total": total,
        # The largest changes of each kind first, at most ``examples`` of each;
        # ``example_counts``: how many there were of each, so the cut can be said.
        "examples": {
            k: [e for _, e in sorted(v, key=lambda p: -p[0])[:examples]]
            for k, v in found.items()
        },
        "example_counts": {k: len(v) for k, v in found.items()},
        "not_reweightable": dumps_missing(missing),
        "fixed": [
            {"component": k, "reason": _FIXED_REASON.get(k, _FIXED_REASON[""])}
            for k in sorted(fixed)
        ],
        "unavailable": [] if advantages else [_GAE_NOTE],
        "skipped_groups": skipped,
    }


_GAE_NOTE = (
    "advantage sign changes: credit 'gae' takes its baseline from the critic's "
    "values, which are not stored; totals, best rollouts and ranks are compared"
)
_FIXED_REASON = {
    "(unattributed)": "the stored total differs from the sum of its components; "
    "the difference is kept as stored",
    "": "not in the run's reward config (its weight is unknown); kept as stored",
}


def _step_counts(
    rows: Sequence[StoredRollout],
    before: Sequence[Reweighed],
    after: Sequence[Reweighed],
    algo: ResolvedAlgorithm,
    G: int,
    found: dict[str, list[tuple[float, dict[str, Any]]]],
) -> dict[str, Any]:
    c: dict[str, Any] = dict.fromkeys(_COUNTS, 0)
    c["groups"] = len(rows) // G
    a_old = step_advantages(rows, before, algo, G)
    a_new = step_advantages(rows, after, algo, G)
    if a_old is not None and a_new is not None:
        for i, ro in enumerate(rows):
            o, n = a_old.per_traj[i], a_new.per_traj[i]
            if o is None:  # dropped: never trained on
                continue
            c["trajectories"] += 1
            for t, k in enumerate(_trained(ro, algo)):
                c["tokens"] += k
                if sign(_at(a_old.per_step[i], t)) != sign(_at(a_new.per_step[i], t)):
                    c["token_flips"] += k
            if sign(o) != sign(n):
                c["sign_flips"] += 1
                flip = _flip(sign(o), sign(n))
                c[f"sign_{flip}"] += 1
                ex = _example(ro, before[i], after[i], old_advantage=o, new_advantage=n)
                ex["flip"] = flip
                found["sign_flip"].append((abs(n - o), ex))
        zv = zip(a_old.zero_variance, a_new.zero_variance, strict=True)
        for g, (zo, zn) in enumerate(zv):
            if zo == zn:
                continue
            c["signal_lost" if zn else "signal_gained"] += 1
            ro = rows[g * G]
            ex = _example(ro, before[g * G], after[g * G])
            ex["now_zero_variance"] = zn
            ex["dropped"] = ro.dropped
            found["signal_change"].append((1.0, ex))
    for g in range(len(rows) // G):
        sl = slice(g * G, (g + 1) * G)
        b_old = best_of([s.total for s in before[sl]])
        b_new = best_of([s.total for s in after[sl]])
        if b_old != b_new:
            c["best_changes"] += 1
            i = g * G + b_new
            ex = _example(rows[i], before[i], after[i])
            ex["old_best"] = rows[g * G + b_old].index
            margin = after[i].total - after[g * G + b_old].total
            found["best_change"].append((margin, ex))
    return c


def _rank_changes(
    pairs: list[tuple[int, dict[str, Any], list[float], list[float]]],
    per_step: list[dict[str, Any]],
    found: dict[str, list[tuple[float, dict[str, Any]]]],
) -> None:
    """Kendall's tau of every group at once; a group ranks differently when tau < 1."""
    for s in per_step:
        s["tau_sum"], s["tau_groups"] = 0.0, 0
    if not pairs:
        return
    x = np.array([p[2] for p in pairs], dtype=np.float64)
    y = np.array([p[3] for p in pairs], dtype=np.float64)
    taus = kendall_tau_b(x, y)
    for (slot, ex, _, _), tau in zip(pairs, taus.tolist(), strict=True):
        if math.isnan(tau):
            continue
        s = per_step[slot]
        s["tau_sum"] += tau
        s["tau_groups"] += 1
        if tau < 1.0 - 1e-12:
            s["rank_changes"] += 1
            found["rank_change"].append((1.0 - tau, {**ex, "tau": tau}))


def _flip(old: int, new: int) -> str:
    """How an advantage's sign changed: "to_zero" (no push any more), "from_zero"
    (a push where there was none) or "reversed" (the push turned round)."""
    if new == 0:
        return "to_zero"
    return "from_zero" if old == 0 else "reversed"


def _at(values: Sequence[float], t: int) -> float:
    return values[t] if t < len(values) else 0.0


def _example(
    ro: StoredRollout, old: Reweighed, new: Reweighed, **extra: float | None
) -> dict[str, Any]:
    return {
        "step": ro.step,
        "group": ro.group,
        "index": ro.index,
        "task_id": ro.task_id,
        "old_total": old.total,
        "new_total": new.total,
        **extra,
    }


def _finish(s: dict[str, Any], advantages: bool) -> None:
    """Derived numbers; advantage counts are None when they cannot be computed."""
    n = s.pop("tau_groups")
    tau_sum = s.pop("tau_sum")
    s["tau_mean"] = tau_sum / n if n else None
    s["tau_groups"] = n
    if not advantages:
        for k in _ADVANTAGE_COUNTS:
            s[k] = None
        s["token_flip_share"] = None
    else:
        s["token_flip_share"] = s["token_flips"] / s["tokens"] if s["tokens"] else 0.0


def weights_report(old: Weighting, new_weights: Mapping[str, float]) -> dict[str, Any]:
    """The base weights old and new, each component's schedule kind, and the
    components added (weights for components the run did not have)."""
    return {
        "old": dict(old.weights),
        "new": {**old.weights, **new_weights},
        "added": sorted(k for k in new_weights if k not in old.weights),
        "scheduled": sorted(
            k for k, s in old.schedules.items() if s.kind != "constant"
        ),
    }
