"""What-if reweighting: what stored rollouts would have taught under other weights.

Every stored trajectory keeps its reward components as the trainer paid them, i.e.
*weighted*: :mod:`rewards.combine` stores ``w_i(step) * c_i`` per step and in total, with
``w_i(step)`` the component's scheduled weight at the rollout's training step. So a
component's new value is ``stored * w_new(step) / w_old(step)``, where ``w_new`` applies
the component's own schedule to the new base weight (a linear anneal stays a linear
anneal, from the new weight to the schedule's end). A component stored at a step where
its old weight was 0 holds no information about its raw value: it cannot be reweighted
there and is reported as such (kept at its stored 0), never guessed. Components the
run's config does not name (and any part of the total no component explains) are kept as
stored and named in ``fixed``.

A component the run did not have (the repair loop's ``r_finish`` on a run that paid
only for spawning) has no stored value to rescale: the caller computes its raw,
unweighted per-step values from the stored episode (``StoredRollout.added``) and the
new weighting adds ``w_new(step) * raw`` to the new totals; the old totals are the
stored ones, without it.

Advantages are recomputed with :mod:`trainer.algorithms` exactly as the trainer does
(``group_advantages`` for outcome credit, ``process_advantages`` for process credit,
``zero_variance_groups`` for the group filter), once with the run's own weights and once
with the new ones, on the same rows: with the run's weights the two agree bit for bit,
so the report shows zero changes. GAE credit needs the critic's values, which are not
stored: advantage changes are then unavailable (said so), rank changes still reported.

Pure: no Django, no I/O. ``dashboard.reads.whatif`` loads the rows and calls :func:`compare`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rewards.config import WeightSchedule
from rewards.schedule import weight_at
from trainer.algorithms import (
    ResolvedAlgorithm,
    group_advantages,
    process_advantages,
    zero_variance_groups,
)

# |advantage| at or below this counts as 0 (no push either way).
SIGN_TOL = 1e-6
KINDS = ("sign_flip", "best_change", "rank_change", "signal_change")


@dataclass(frozen=True)
class StoredRollout:
    """One stored trajectory, as much of it as the what-if reads.

    ``components``/``per_step``: the stored (weighted) values per component key.
    ``tokens_per_step``: trained (action) tokens of each agent step.
    ``added``: raw (unweighted) per-step values of components the run's reward did
    not have, computed from the stored episode.
    """

    step: int
    group: int
    index: int
    total: float
    components: Mapping[str, float]
    per_step: Mapping[str, Sequence[float]] = field(default_factory=dict)
    tokens_per_step: Sequence[int] = ()
    dropped: bool = False
    truncated: bool = False
    task_id: str = ""
    added: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Weighting:
    """Base weight and schedule of each configured component (by key)."""

    weights: Mapping[str, float]
    schedules: Mapping[str, WeightSchedule] = field(default_factory=dict)

    def at(self, key: str, step: int) -> float:
        return weight_at(
            self.weights[key], self.schedules.get(key, WeightSchedule()), step
        )

    def with_weights(self, new: Mapping[str, float]) -> Weighting:
        return Weighting({**self.weights, **new}, self.schedules)

    def added_at(self, old: Weighting, step: int) -> dict[str, float]:
        """Weights at ``step`` of the components this weighting has and ``old``
        does not (added ones: constant schedule unless given one)."""
        return {k: self.at(k, step) for k in self.weights if k not in old.weights}


@dataclass
class Reweighed:
    total: float
    step_totals: list[float]


def step_factors(old: Weighting, new: Weighting, step: int) -> dict[str, float | None]:
    """Per configured component, what its stored value is multiplied by at ``step``:
    ``w_new(step) / w_old(step)``, 1.0 where they agree, None where ``w_old`` is 0 and
    ``w_new`` is not (the raw value was never stored)."""
    out: dict[str, float | None] = {}
    for key in old.weights:
        w_old, w_new = old.at(key, step), new.at(key, step)
        if w_new == w_old:
            out[key] = 1.0
        else:
            out[key] = None if w_old == 0.0 else w_new / w_old
    return out


def _factor(
    key: str,
    factors: Mapping[str, float | None],
    step: int,
    missing: dict[str, set[int]],
    fixed: set[str],
) -> float:
    """What ``key``'s stored value is multiplied by: its factor; 1.0, recorded in
    ``missing`` (at ``step``), where it cannot be recovered, or in ``fixed`` where the
    config does not name it."""
    if key not in factors:
        fixed.add(key)
        return 1.0
    factor = factors[key]
    if factor is None:
        missing.setdefault(key, set()).add(step)
        return 1.0
    return factor


def reweigh(
    ro: StoredRollout,
    factors: Mapping[str, float | None],
    missing: dict[str, set[int]],
    fixed: set[str],
) -> Reweighed:
    """The rollout's total and per-step totals under ``factors`` (see
    :func:`step_factors` at the rollout's step). Records in ``missing`` (component ->
    steps) what could not be recovered and in ``fixed`` what is kept as stored."""
    # Runs twice per rollout per request (old and new weights): a flat loop, no
    # generator or helper per value.
    per_step = ro.per_step
    n_steps = 1
    for v in per_step.values():
        if len(v) > n_steps:
            n_steps = len(v)
    steps = [0.0] * n_steps
    parts = []
    for key, stored in ro.components.items():
        factor = _factor(key, factors, ro.step, missing, fixed)
        parts.append(stored * factor)
        per = per_step.get(key)
        if per:
            for t, v in enumerate(per):
                steps[t] += v * factor
        else:  # no per-step values: paid on the last step (as the trainer sums it)
            steps[-1] += stored * factor
    residual = ro.total - math.fsum(ro.components.values())
    if abs(residual) > 1e-9:
        fixed.add("(unattributed)")
        parts.append(residual)
        steps[-1] += residual
    return Reweighed(math.fsum(parts), steps)


@dataclass
class StoredMatrix:
    """One step's rollouts as arrays, built once per request and reweighed twice (old
    and new weights): ``comps`` (N, K) stored values of ``keys``; ``per`` (N, K, T)
    their per-step values (a component without them sits on the rollout's last step,
    as :func:`reweigh` puts it); ``totals`` and ``step_totals`` as stored (the
    unattributed residual included); ``n_steps`` each rollout's agent steps."""

    step: int
    keys: list[str]
    comps: np.ndarray
    per: np.ndarray
    totals: np.ndarray
    step_totals: np.ndarray
    n_steps: list[int]
    residual: bool
    added_keys: list[str] = field(default_factory=list)
    added: np.ndarray | None = None  # (N, A, T) raw per-step values of added_keys


def stored_matrix(rows: Sequence[StoredRollout]) -> StoredMatrix:
    """:class:`StoredMatrix` of rows of one training step."""
    index: dict[str, int] = {}
    for ro in rows:
        for key in ro.components:
            if key not in index:
                index[key] = len(index)
    n_steps = []
    for ro in rows:
        n = 1
        for v in ro.per_step.values():
            if len(v) > n:
                n = len(v)
        n_steps.append(n)
    N, K, T = len(rows), len(index), max(n_steps, default=1)
    comps = np.zeros((N, K))
    per = np.zeros((N, K, T))
    totals = np.empty(N)
    residual = False
    for i, ro in enumerate(rows):
        row, last = per[i], n_steps[i] - 1
        for key, stored in ro.components.items():
            k = index[key]
            comps[i, k] = stored
            values = ro.per_step.get(key)
            if values:
                row[k, : len(values)] = values
            else:
                row[k, last] = stored
        totals[i] = ro.total
    # Summed in component order from 0.0, as reweigh does: the same float totals.
    step_totals = per.sum(axis=1) if K else np.zeros((N, T))
    for i, ro in enumerate(rows):
        r = ro.total - math.fsum(ro.components.values())
        if abs(r) > 1e-9:
            residual = True
            step_totals[i, n_steps[i] - 1] += r
    return StoredMatrix(
        rows[0].step if rows else 0,
        list(index),
        comps,
        per,
        totals,
        step_totals,
        n_steps,
        residual,
        *_added_matrix(rows, n_steps, T),
    )


def _added_matrix(
    rows: Sequence[StoredRollout], n_steps: Sequence[int], T: int
) -> tuple[list[str], np.ndarray | None]:
    """The added components' keys and their raw values (N, A, T), a value past a
    rollout's steps landing on its last one."""
    keys = list(dict.fromkeys(k for ro in rows for k in ro.added))
    if not keys:
        return [], None
    out = np.zeros((len(rows), len(keys), T))
    for i, ro in enumerate(rows):
        for a, key in enumerate(keys):
            for t, v in enumerate(ro.added.get(key, ())):
                out[i, a, min(t, n_steps[i] - 1)] += v
    return keys, out


def reweigh_matrix(
    m: StoredMatrix,
    factors: Mapping[str, float | None],
    missing: dict[str, set[int]],
    fixed: set[str],
    added: Mapping[str, float] | None = None,
) -> list[Reweighed]:
    """:func:`reweigh` of every rollout of ``m`` at once. Written as the stored values
    plus each component's change (``stored * (factor - 1)``), so that with every
    factor 1 the totals are exactly the stored ones, whatever the summation order.
    ``added``: weights at this step of components the run did not have, paid on
    their raw values (``m.added``)."""
    delta = np.zeros(len(m.keys))
    for k, key in enumerate(m.keys):
        delta[k] = _factor(key, factors, m.step, missing, fixed) - 1.0
    if m.residual:
        fixed.add("(unattributed)")
    if delta.any():
        totals = (m.totals + m.comps @ delta).tolist()
        steps = (m.step_totals + np.einsum("nkt,k->nt", m.per, delta)).tolist()
    else:
        totals, steps = m.totals.tolist(), m.step_totals.tolist()
    w = np.array([(added or {}).get(k, 0.0) for k in m.added_keys])
    if m.added is not None and w.any():
        extra = np.einsum("nat,a->nt", m.added, w)
        totals = (np.asarray(totals) + extra.sum(axis=1)).tolist()
        steps = (np.asarray(steps) + extra).tolist()
    return [
        Reweighed(t, s[:n]) for t, s, n in zip(totals, steps, m.n_steps, strict=True)
    ]


@dataclass
class StepAdvantages:
    """Per rollout of one step: the trajectory's advantage (None: not trained) and
    the advantage of each agent step's tokens."""

    per_traj: list[float | None]
    per_step: list[list[float]]
    zero_variance: list[bool]  # per group


def step_advantages(
    rows: Sequence[StoredRollout],
    scored: Sequence[Reweighed],
    algo: ResolvedAlgorithm,
    group_size: int,
) -> StepAdvantages | None:
    """Advantages of one step's rows (whole groups, in group order) as the trainer
    computed them: dropped groups sit out (0, untrained), the rest form the batch."""
    G = group_size
    totals = torch.tensor([s.total for s in scored], dtype=torch.float32)
    zv = zero_variance_groups(totals, G).tolist()
    if algo.credit == "gae":
        return None
    kept = [i for i, r in enumerate(rows) if not r.dropped]
    per_traj: list[float | None] = [None] * len(rows)
    per_step: list[list[float]] = [[0.0] * len(s.step_totals) for s in scored]
    if not kept:
        return StepAdvantages(per_traj, per_step, zv)
    if algo.credit == "outcome":
        adv = group_advantages(
            totals[kept], G, std_scaling=algo.std_scaling, eps=algo.eps
        ).tolist()
        for j, i in enumerate(kept):
            per_step[i] = [adv[j]] * len(scored[i].step_totals)
            per_traj[i] = adv[j]
    else:  # process credit
        steps = process_advantages(
            [scored[i].step_totals for i in kept],
            G,
            std_scaling=algo.std_scaling,
            eps=algo.eps,
        )
        for j, i in enumerate(kept):
            per_step[i] = steps[j]
            per_traj[i] = _token_mean(steps[j], _trained(rows[i], algo))
    for g, zero in enumerate(zv):
        # Outcome credit: a group of equal totals has no signal; what the tensor
        # holds there is float noise / (0 + eps). (Process credit normalises step
        # rewards, which may still differ, so its values stand.)
        if zero and algo.credit == "outcome":
            for i in range(g * G, (g + 1) * G):
                per_step[i] = [0.0] * len(per_step[i])
                per_traj[i] = None if per_traj[i] is None else 0.0
    return StepAdvantages(per_traj, per_step, zv)


def _trained(ro: StoredRollout, algo: ResolvedAlgorithm) -> list[int]:
    """Trained tokens per agent step (none for dropped or masked-truncated rows)."""
    if ro.dropped or (algo.mask_truncated and ro.truncated):
        return [0] * len(ro.tokens_per_step)
    return list(ro.tokens_per_step)


def _token_mean(step_adv: Sequence[float], tokens: Sequence[int]) -> float:
    """The trainer's per-trajectory display advantage: the mean over trained tokens;
    tokens of a step beyond the advantages get 0 (as ``_spread_steps`` pads)."""
    n = sum(tokens)
    if n == 0:
        return 0.0
    adv = list(step_adv) + [0.0] * max(0, len(tokens) - len(step_adv))
    return math.fsum(a * k for a, k in zip(adv, tokens, strict=False)) / n


def sign(x: float | None) -> int:
    if x is None or abs(x) <= SIGN_TOL:
        return 0
    return 1 if x > 0 else -1


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair of ``x`` and ``y`` (N, G) -> (N,), NaN where a
    row is constant; the same numbers as ``scipy.stats.kendalltau`` per row, for all
    groups at once (scipy's per-call overhead is ~0.3 ms, 1 s for 10k rollouts)."""
    i, j = np.triu_indices(x.shape[1], 1)
    dx, dy = np.sign(x[:, j] - x[:, i]), np.sign(y[:, j] - y[:, i])
    concord = (dx * dy).sum(1)
    nx, ny = (dx != 0).sum(1), (dy != 0).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return concord / np.sqrt(nx * ny)


def best_of(totals: Sequence[float]) -> int:
    """The group's best rollout: the highest total, the lowest index on a tie."""
    return int(np.argmax(np.asarray(totals)))


def weighting_from_components(components: Sequence[Any]) -> Weighting:
    """A :class:`Weighting` from ``rewards.config`` component configs."""
    return Weighting(
        {c.key: c.weight for c in components},
        {c.key: c.schedule for c in components},
    )


def dumps_missing(missing: Mapping[str, set[int]]) -> list[dict[str, Any]]:
    return [
        {
            "component": k,
            "steps": sorted(v),
            "reason": "its weight was 0 at these steps, so its raw value was not "
            "stored; kept at 0",
        }
        for k, v in sorted(missing.items())
    ]


__all__ = [
    "KINDS",
    "SIGN_TOL",
    "StepAdvantages",
    "StoredRollout",
    "Weighting",
    "best_of",
    "kendall_tau_b",
    "reweigh",
    "reweigh_matrix",
    "sign",
    "step_advantages",
    "step_factors",
    "stored_matrix",
    "weighting_from_components",
]
