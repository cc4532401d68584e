"""The repair loop's knowledge: which reward weight removes a hack's incentive, and
which statistic shows whether the hack came back.

For each detector kind (:mod:`rewards.detectors`) a :class:`Fix` names the component
whose weight takes the incentive away and how to set it, after the recipes the
detectors come from: r_finish pays for subtasks finished, not for sub-agents spawned
(Kimi K2.5 PARL, against spurious parallelism); r_parallel pays for fanning out
(against serial collapse); trajectory recall pays for every gold document surfaced
on the way, so searching on pays (Chroma Context-1, against single-search exit); the
prune penalty charges each small prune past the allowed ones (against one-at-a-time
pruning); a judge that pays what the verifier does not confirm is set to 0 until its
rubric is fixed. Detectors with no weight that fixes them (length drift wants a
length penalty with the run's own budget, entropy collapse and a missing learning
signal are not incentives) have no fix: the panel says so instead of guessing (a
component whose addition does, the length penalty: :mod:`rewards.repair_additions`).

:data:`WATCHED` lists, per kind, the per-step metrics its detector judges and the
threshold each is held to, with the side of the line the hack lives on: the clone's
page charts them for the parent and the clone (``dashboard.reads.repair``).

Pure: no Django. The thresholds' values come from the run's
:class:`rewards.config.DetectorConfig` (``DEFAULT_THRESHOLDS`` unless overridden).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from rewards.config import DetectorConfig

Side = Literal["above", "below"]


@dataclass(frozen=True)
class Fix:
    """Set ``component``'s base weight to at least ``floor``, ``factor`` times its
    current one and (``match``) the weight of the component it must outweigh; or,
    with ``lower``, to ``floor`` at most."""

    component: str
    why: str
    floor: float = 0.0
    factor: float = 1.0
    match: str | None = None
    lower: bool = False


@dataclass(frozen=True)
class Watched:
    """A per-step metric a detector judges, its threshold and the hack's side of it
    (at or above, at or below). ``per``: the metric is the ratio of ``metric`` to
    this one (the share of prunes that drop one document)."""

    metric: str
    threshold: str
    side: Side
    label: str
    per: str | None = None
    # A threshold past which, on the far side, the statistic leaves the hack's zone
    # again (serial collapse: under 0.5 sub-agents a stage a policy spawns none), and
    # its value under a run's configuration (see :func:`thresholds`).
    floor: str | None = None
    floor_value: float | None = None
    # The evidence key an alert carries when it fired on this statistic (a detector
    # that fires on either of two): None, it always judges it.
    path: str | None = None

    def value(self, metrics: Mapping[str, float]) -> float | None:
        """This statistic from one step's metrics; None when it cannot be read."""
        x = metrics.get(self.metric)
        if x is None:
            return None
        if self.per is None:
            return x
        d = metrics.get(self.per)
        return x / d if d else None

    def hacked(self, value: float, threshold: float) -> bool:
        if self.side == "above":
            return value >= threshold and (
                self.floor_value is None or value <= self.floor_value
            )
        return value <= threshold and (
            self.floor_value is None or value >= self.floor_value
        )


FIXES: dict[str, Fix] = {
    "spurious_parallelism": Fix(
        "r_finish",
        "r_finish pays for subtasks finished, not for sub-agents spawned: at "
        "r_parallel's weight, a sub-agent that finishes nothing earns half of what "
        "one that finishes earns (PARL)",
        floor=0.3,
        match="r_parallel",
    ),
    "serial_collapse": Fix(
        "r_parallel",
        "r_parallel pays for sub-agents instantiated, so fanning out pays again "
        "(PARL; anneal it once the policy parallelises)",
        floor=0.3,
        factor=2.0,
    ),
    "single_search_exit": Fix(
        "trajectory_recall",
        "trajectory recall pays for every gold document surfaced along the way, so "
        "searching past the first query pays (Context-1)",
        floor=0.4,
        factor=2.0,
    ),
    "one_at_a_time_pruning": Fix(
        "prune_penalty",
        "the prune penalty charges every small prune past the allowed ones, so "
        "dropping documents one at a time costs more than it earns",
        floor=2.0,
        factor=2.0,
    ),
    "judge_verifier_divergence": Fix(
        "judge",
        "the judge pays for what the verifier does not confirm: off until its "
        "rubric stops rewarding the phrasing",
        floor=0.0,
        lower=True,
    ),
}

WATCHED: dict[str, tuple[Watched, ...]] = {
    # Either statistic fires it (see rewards.detectors.serial_collapse): a clone is
    # judged by the one its parent's alert named.
    "serial_collapse": (
        Watched(
            "serial/mean",
            "serial_collapse.min_serial_share",
            "above",
            "share of episodes that did their work one subtask at a time",
            path="serial_late",
        ),
        Watched(
            "parallelism/mean",
            "serial_collapse.max_parallelism",
            "below",
            "sub-agents per stage",
            floor="serial_collapse.min_parallelism",
            path="parallelism_late",
        ),
    ),
    "spurious_parallelism": (
        Watched(
            "finish_rate/mean",
            "spurious_parallelism.max_finish_rate",
            "below",
            "share of subtasks finished",
        ),
        Watched(
            "parallelism/mean",
            "spurious_parallelism.min_parallelism",
            "above",
            "sub-agents per stage",
        ),
    ),
    "single_search_exit": (
        Watched(
            "single_search_exit/mean",
            "single_search_exit.min_frac",
            "above",
            "share of episodes answered after at most one search",
        ),
    ),
    "one_at_a_time_pruning": (
        Watched(
            "single_doc_prunes/mean",
            "one_at_a_time_pruning.min_single_frac",
            "above",
            "share of prunes that drop one document",
            per="prunes/mean",
        ),
        Watched(
            "prunes/mean",
            "one_at_a_time_pruning.min_prunes",
            "above",
            "prunes per episode",
        ),
    ),
    "length_drift": (
        Watched(
            "truncated/frac",
            "length_drift.max_truncated",
            "above",
            "share of episodes cut off by the budget",
        ),
    ),
    "entropy_collapse": (
        Watched(
            "entropy", "entropy_collapse.min_entropy", "below", "entropy (nats/token)"
        ),
    ),
    "no_learning_signal": (
        Watched(
            "frac_reward_zero_std",
            "no_learning_signal.min_frac",
            "above",
            "share of groups with identical rewards",
        ),
    ),
}


@dataclass(frozen=True)
class Component:
    """A component of a run's reward as the suggestion reads it."""

    key: str  # its name in results (label or name)
    name: str  # the registered component
    weight: float


@dataclass(frozen=True)
class Suggestion:
    detector: str
    component: str  # the key to set (the component's name when the run lacks it)
    weight: float
    current: float | None  # None: the run's reward has no such component
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "component": self.component,
            "weight": self.weight,
            "current": self.current,
            "added": self.current is None,
            "why": self.why,
        }


def suggest(
    detector: str,
    components: Sequence[Component],
    available: Sequence[str] = (),
) -> Suggestion | None:
    """The weight that removes ``detector``'s incentive in a reward made of
    ``components``; None when no weight does (see the module docstring) or when the
    component is neither in the reward nor among ``available`` (the components the
    run's environment offers).

    >>> run = [Component("r_perf", "r_perf", 0.2), Component("r_parallel",
    ...        "r_parallel", 1.0)]
    >>> s = suggest("spurious_parallelism", run, ["r_finish"])
    >>> (s.component, s.weight, s.current)
    ('r_finish', 1.0, None)
    >>> suggest("entropy_collapse", run) is None
    True
    """
    fix = FIXES.get(detector)
    if fix is None:
        return None
    mine = next((c for c in components if c.name == fix.component), None)
    if mine is None and fix.component not in available:
        return None
    current = mine.weight if mine is not None else None
    if fix.lower:
        weight = min(current if current is not None else fix.floor, fix.floor)
    else:
        weight = max(fix.floor, fix.factor * (current or 0.0))
        if fix.match is not None:
            # (a list: with no such component, max() of one float raised)
            weight = max(
                [weight, *(c.weight for c in components if c.name == fix.match)]
            )
    if current is not None and weight == current and not fix.lower:
        weight = max(2.0 * current, fix.floor)  # already there and still hacked
    key = mine.key if mine is not None else fix.component
    return Suggestion(detector, key, round(weight, 6), current, fix.why)


def thresholds(
    detector: str, cfg: DetectorConfig, evidence: Mapping[str, Any] | None = None
) -> list[tuple[Watched, float]]:
    """The statistics ``detector`` watches, each with its threshold under ``cfg``.
    Of a detector that fires on either of two statistics, the one the alert's
    ``evidence`` names (without it, or naming neither: the first).

    >>> [w.metric for w, _ in thresholds("serial_collapse", DetectorConfig(),
    ...                                  {"parallelism_late": 0.9})]
    ['parallelism/mean']
    >>> [w.metric for w, _ in thresholds("serial_collapse", DetectorConfig())]
    ['serial/mean']
    """
    watched = WATCHED.get(detector, ())
    if any(w.path for w in watched):
        named = [w for w in watched if w.path is None or w.path in (evidence or {})]
        watched = tuple(named) if any(w.path for w in named) else watched[:1]
    return [
        (
            replace(w, floor_value=cfg.threshold(w.floor)) if w.floor else w,
            cfg.threshold(w.threshold),
        )
        for w in watched
    ]


# Generic components that read only an episode's facts (env-specific ones always do):
# the ones a run may add. The judge needs judgements, ``process`` a fact key to choose;
# ``overlong_penalty`` is sized to the run's own length budget, so it is one only
# where that budget is known (:func:`rewards.repair_additions.sized_params`).
_ADDABLE_GENERIC = ("outcome", "format")
_ADDABLE_SIZED = ("overlong_penalty",)
MAX_WEIGHT = 1000.0  # the reward schema's bound on a component weight


def addable(env: str, present: Iterable[str], budget: int | None = None) -> list[str]:
    """Registered components a run on ``env`` may add to its reward (not in
    ``present``), in registration order; each has default parameters, or, given the
    run's generation ``budget``, parameters sized to it."""
    from pydantic import ValidationError

    from rewards.components import COMPONENTS

    have = set(present)
    generic = _ADDABLE_GENERIC + (_ADDABLE_SIZED if budget is not None else ())
    out = []
    for name in COMPONENTS.in_order():
        spec = COMPONENTS.get(name)
        fits = name in generic if spec.envs is None else env in spec.envs
        if not fits or name in have:
            continue
        try:
            spec.params()
        except ValidationError:
            continue
        out.append(name)
    return out


def check_weights(
    weights: Any, known: Sequence[str], can_add: Sequence[str] = ()
) -> tuple[dict[str, float], list[str]]:
    """``({component: weight}, errors)``: each error names ``weights.<key>``. Keys are
    the reward's components (``known``) or ones it may add (``can_add``)."""
    if weights is None:
        return {}, []
    if not isinstance(weights, dict):
        return {}, ["weights: must be an object {component: weight}"]
    errors, out = [], {}
    for key, value in weights.items():
        shown = str(key) if len(str(key)) <= 64 else str(key)[:64] + "…"
        if key not in known and key not in can_add:
            extra = f"; it may add: {', '.join(can_add)}" if can_add else ""
            errors.append(
                f"weights.{shown}: unknown component (this run has: "
                f"{', '.join(known) or 'none'}{extra})"
            )
        elif (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or abs(value) > MAX_WEIGHT
        ):
            errors.append(f"weights.{shown}: must be a number from -1000 to 1000")
        else:
            out[key] = float(value)
    return out, errors


def reweighted(
    reward: Mapping[str, Any],
    weights: Mapping[str, float],
    budget: int | None = None,
) -> dict:
    """A reward config dump (``RewardConfig.model_dump(mode="json")``) with these
    base weights; a weight (not 0) for a component it does not have adds that
    component (constant weight; default parameters, or sized to the run's generation
    ``budget``: :func:`rewards.repair_additions.sized_params`). Schedules are kept."""
    from rewards.repair_additions import sized_params

    data = {**reward, "components": [dict(c) for c in reward["components"]]}
    have = set()
    for comp in data["components"]:
        key = comp.get("label") or comp["name"]
        have.add(key)
        if key in weights:
            comp["weight"] = weights[key]
    for key, weight in weights.items():
        if key not in have and weight != 0:  # a component at weight 0 pays nothing
            params = sized_params(key, budget)
            data["components"].append(
                {
                    "name": key,
                    "weight": weight,
                    **({"params": params} if params else {}),
                }
            )
    return data
