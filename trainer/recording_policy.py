"""The recording policy: which trajectories of a step are stored, and with what.

Metrics are stored on every step; trajectories (with their judgements and critical
paths) only on every ``every``-th step (and, on any step, the groups an alert points
at: an alert leads to its evidence), and on such a step only some groups:

* the best and the worst group by mean reward (what a user looks for first),
* every group an alert of that step points at (the groups of its ``trajectories``,
  the trajectories its detector names, and ``evidence["group"]`` or
  ``evidence["groups"]``),
* then a sample of the other groups, seeded by (run seed, step), up to ``groups``.

``groups`` None keeps every group; ``"auto"`` (the default) keeps every group while a
step has at most :data:`AUTO_MAX_ROLLOUTS` rollouts (today's toy runs: nothing
changes) and, past it, enough groups for that many rollouts (8 groups of 8 out of 32).
Where the run's plan is known (``planned``: tasks x group size, our trainer's), the plan
decides, not the step: the groups DAPO's dynamic sampling adds to a small run's step
(10 groups of 8 where 8 were planned) are kept with the others, as the run page says.
``token_arrays`` off stores no per-token arrays (token ids, log-probs, ratios,
entropies, advantages, token strings): the text of every segment stays.

One pure function, :func:`select`, decides; the trainer applies it before building
records (an unrecorded record is never built) and the server applies it to external
runs' events as they are stored (``dashboard.ingest.writer.store``), so native, streamed and
imported runs follow the same rule. Knows nothing of Django or tensors.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

AUTO_MAX_ROLLOUTS = 64
MAX_GROUPS = 65536


class RecordConfig(BaseModel):
    """What is stored of each step's trajectories (metrics are always stored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: int = Field(
        1,
        ge=1,
        le=1_000_000,
        description="Trajectories stored on every every-th step (metrics: every step).",
    )
    groups: int | Literal["auto"] | None = Field(
        "auto",
        description="Groups stored per recorded step: the best, the worst, those an "
        "alert points at, then a seeded sample. Empty: all; auto: all up to "
        f"{AUTO_MAX_ROLLOUTS} rollouts a step, else that many rollouts' worth.",
    )
    token_arrays: bool = Field(
        True,
        description="Store per-token arrays (token ids, log-probs, ratios, entropy, "
        "advantages); off: segment texts only.",
    )

    @field_validator("groups", mode="before")
    @classmethod
    def _groups(cls, value: Any) -> Any:
        ok = value is None or value == "auto"
        ok = ok or (type(value) is int and 1 <= value <= MAX_GROUPS)
        if not ok:
            raise ValueError(
                f'must be a whole number from 1 to {MAX_GROUPS}, "auto" or null (all)'
            )
        return value


DEFAULT = RecordConfig()


@dataclass(frozen=True)
class Selection:
    """What to store of one step: ``groups`` (empty on an unrecorded step)."""

    recorded: bool
    groups: frozenset[int]
    token_arrays: bool


def policy_from(value: Any) -> RecordConfig:
    """A run config's ``record`` value (a dict, a RecordConfig or None) as a policy;
    raises ``ValueError`` naming the field on a bad one."""
    if value is None:
        return DEFAULT
    if isinstance(value, RecordConfig):
        return value
    from pydantic import ValidationError

    try:
        return RecordConfig.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in ("record", *err["loc"]))
        raise ValueError(f"{loc}: {err['msg']}") from None


def group_budget(
    policy: RecordConfig, n_groups: int, n_rollouts: int, planned: int | None = None
) -> int:
    """How many groups a recorded step keeps (before the alerted ones); ``planned``:
    the rollouts the run plans a step, which ``"auto"`` judges by where given."""
    if policy.groups is None:
        return n_groups
    if policy.groups == "auto":
        small = (planned if planned is not None else n_rollouts) <= AUTO_MAX_ROLLOUTS
        if small or n_groups == 0:
            return n_groups
        size = n_rollouts / n_groups
        return max(2, math.ceil(AUTO_MAX_ROLLOUTS / size))
    return int(policy.groups)


def is_recorded(policy: RecordConfig, step: int) -> bool:
    return step % policy.every == 0 or policy.every == 1


def select(
    policy: RecordConfig,
    step: int,
    rewards: Mapping[int, Sequence[float | None]],
    alerted: Iterable[int] = (),
    seed: int = 0,
    planned: int | None = None,
) -> Selection:
    """The groups of ``step`` to store. ``rewards``: group -> its rollouts' rewards
    (None or NaN: unscored, left out of the mean); ``alerted``: groups an alert of
    this step points at (kept when present in ``rewards``); ``planned``: the rollouts
    the run plans a step (:func:`group_budget`)."""
    if not is_recorded(policy, step):  # an alert's evidence is stored all the same
        pointed = frozenset(g for g in alerted if g in rewards)
        return Selection(bool(pointed), pointed, policy.token_arrays)
    groups = sorted(rewards)
    n_rollouts = sum(len(v) for v in rewards.values())
    budget = group_budget(policy, len(groups), n_rollouts, planned)
    if budget >= len(groups):
        return Selection(True, frozenset(groups), policy.token_arrays)
    means = {g: _mean(rewards[g]) for g in groups}
    scored = sorted((m, g) for g, m in means.items() if m is not None)
    keep: set[int] = {g for g in alerted if g in means}
    chosen: list[int] = []
    if scored:  # ties: the lower group id is the worst, the higher one the best
        chosen = [scored[0][1], scored[-1][1]]
    rest = [g for g in groups if g not in chosen]
    rng = random.Random(f"{seed}:{step}")  # the same groups on every replay
    chosen += rng.sample(rest, k=min(len(rest), max(budget - len(chosen), 0)))
    keep.update(chosen[:budget])
    return Selection(True, frozenset(keep), policy.token_arrays)


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(vals) / len(vals) if vals else None


def alerted_groups(evidences: Iterable[Mapping[str, Any]]) -> set[int]:
    """The groups alerts point at: ``evidence["group"]`` and ``evidence["groups"]``."""
    out: set[int] = set()
    for ev in evidences:
        if not isinstance(ev, Mapping):
            continue
        one, many = ev.get("group"), ev.get("groups")
        for g in ([one] if one is not None else []) + (
            list(many) if isinstance(many, (list, tuple)) else []
        ):
            if isinstance(g, int) and not isinstance(g, bool):
                out.add(g)
    return out


def alert_event_groups(alerts: Iterable[Mapping[str, Any]]) -> set[int]:
    """The groups alert events point at: their ``trajectories``' groups and those in
    their ``evidence`` (:func:`alerted_groups`)."""
    alerts = [a for a in alerts if isinstance(a, Mapping)]
    out = alerted_groups(a.get("evidence") for a in alerts)
    for a in alerts:
        refs = a.get("trajectories")
        for ref in refs if isinstance(refs, (list, tuple)) else ():
            g = ref.get("group") if isinstance(ref, Mapping) else None
            if isinstance(g, int) and not isinstance(g, bool):
                out.add(g)
    return out


def describe(policy: RecordConfig, rollouts_per_step: int | None = None) -> str:
    """One line for the run page: "trajectories every 4th step, 8 groups a step,
    token arrays off"."""
    every = (
        "trajectories every step"
        if policy.every == 1
        else f"trajectories every {_ordinal(policy.every)} step"
    )
    bounded = " (best, worst, alerted, sampled)"
    if policy.groups is None:
        groups, bounded = "all groups", ""
    elif policy.groups == "auto":
        if rollouts_per_step is not None and rollouts_per_step <= AUTO_MAX_ROLLOUTS:
            groups, bounded = "all groups", ""
        else:
            groups = f"all groups up to {AUTO_MAX_ROLLOUTS} rollouts"
            if rollouts_per_step is not None:
                groups = f"about {AUTO_MAX_ROLLOUTS} of {rollouts_per_step} rollouts"
    else:
        groups = f"{policy.groups} group{'s' if policy.groups != 1 else ''}"
    arrays = "token arrays on" if policy.token_arrays else "token arrays off"
    return f"{every}, {groups} a step{bounded}, {arrays}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10)
    return f"{n}{suffix or 'th'}"
