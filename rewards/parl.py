"""PARL (Kimi K2.5 parallel agent RL): critical steps and the three orchestrator rewards.

An orchestrator runs in stages; in each stage it spends some steps of its own and may
launch sub-agents that run in parallel. Latency is the critical path, not the total
work: ``critical_steps = sum over stages of (orchestrator steps + slowest sub-agent)``.
Optimising total steps would pay for spurious parallelism; critical steps only fall
when parallel work really shortens the slowest branch.

``R = r_perf + lambda_parallel * r_parallel + lambda_finish * r_finish`` where the two
lambdas are ordinary component weights, usually annealed to 0 (``WeightSchedule``):
r_parallel bootstraps parallelism against serial collapse, r_finish pays only for
completed subtasks against spurious parallelism, r_perf is the goal.

Reads the swarm environment's facts: per episode ``stages`` (see
:func:`critical_steps`), ``subtasks_assigned``, ``subtasks_completed``,
``num_subagents``, ``success``; per step ``spawned`` and ``completed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewards.components import (
    NO_CONTEXT,
    Context,
    PerStep,
    on_last,
    register_component,
    slots,
    success_value,
)
from rewards.facts import Stage, as_count, as_set, normalize_stages
from rewards.params import FinishParams, ParallelParams, PerfParams
from rewards.types import Episode


def critical_steps(stages: Sequence[Any]) -> int:
    """Sum over stages of orchestrator steps + the slowest sub-agent (0 if none).

    ``stages``: ``[(orchestrator_steps, [sub-agent steps, ...]), ...]`` or the swarm
    environment's ``[{"orchestrator_steps": int, "subagents": [{"steps": int}, ...]}]``.
    Raises ValueError for negative or non-integer steps.

    >>> critical_steps([(1, [5, 3, 4]), (1, [2, 6])])  # (1 + 5) + (1 + 6)
    13
    >>> critical_steps([(2, []), {"orchestrator_steps": 1, "subagents": [{"steps": 3}]}])
    6
    >>> critical_steps([])
    0
    """
    return sum(orch + max(subs, default=0) for orch, subs in normalize_stages(stages))


def stages_from_facts(facts: Mapping[str, Any]) -> list[Stage]:
    """An episode's ``stages`` fact as ``[(orchestrator_steps, [steps, ...]), ...]``."""
    return normalize_stages(facts.get("stages"))


def critical_path(stages: Sequence[Any]) -> dict[str, Any]:
    """The critical-path record the UI draws: per stage, which sub-agent was slowest.

    >>> cp = critical_path([(1, [5, 3, 4]), (2, [])])
    >>> cp["critical_steps"], cp["total_steps"], cp["path"]
    (8, 15, [0, None])
    """
    norm = normalize_stages(stages)
    path = [
        max(range(len(subs)), key=subs.__getitem__) if subs else None
        for _, subs in norm
    ]
    return {
        "stages": [dict(s) if isinstance(s, Mapping) else list(s) for s in stages],
        "critical_steps": sum(orch + max(subs, default=0) for orch, subs in norm),
        "total_steps": sum(orch + sum(subs) for orch, subs in norm),
        "path": path,
    }


def parallelism(stages: Sequence[Stage]) -> float:
    """Mean sub-agents per stage, over the stages that launched any (0 if none did).

    This is the width of the fan-out: 1.0 means one sub-agent at a time (serial), no
    matter how many stages ran.

    >>> parallelism([(1, [3, 4, 2]), (1, []), (1, [5])])
    2.0
    """
    widths = [len(subs) for _, subs in stages if subs]
    return sum(widths) / len(widths) if widths else 0.0


def num_subagents(ep: Episode) -> int:
    if "num_subagents" in ep.facts:
        return as_count(ep.facts["num_subagents"])
    return sum(len(subs) for _, subs in stages_from_facts(ep.facts))


def episode_critical_steps(ep: Episode) -> int:
    """From ``stages`` when present, else the ``critical_steps`` fact, else the steps."""
    if ep.facts.get("stages") is not None:
        return critical_steps(ep.facts["stages"])
    if "critical_steps" in ep.facts:
        return as_count(ep.facts["critical_steps"])
    return ep.num_steps


def new_items(ep: Episode, key: str) -> list[int]:
    """Per step, how many items of the (possibly cumulative) list ``key`` are new."""
    seen: set[str] = set()
    out = []
    for s in ep.steps:
        new = as_set(s.facts.get(key)) - seen
        seen |= new
        out.append(len(new))
    return out


def spread_counts(ep: Episode, counts: Sequence[int], total: int, unit: int) -> PerStep:
    """``total / unit`` split over the steps by their ``counts`` (in order, up to
    ``total``); what no step accounts for lands on the last step."""
    out = [0.0] * slots(ep)
    left = total
    for i, n in enumerate(counts):
        take = min(n, left)
        out[i] += take / unit
        left -= take
    out[-1] += left / unit
    return tuple(out)


@register_component("r_perf", PerfParams, envs={"swarm"})
def r_perf(ep: Episode, p: PerfParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """Task success discounted by latency: ``s * (1 - discount * min(1, cs / budget))``
    with ``cs`` the critical steps; budget 0 means no discount. On the last step.

    >>> from rewards.synthetic import episode
    >>> ep = episode("swarm", [{}], success=True, stages=[(2, [3, 8]), (0, [])])
    >>> r_perf(ep, PerfParams(budget=20, discount=0.5))  # cs = 10: 1 - 0.5 * 0.5
    (0.75,)
    """
    value = success_value(ep, p.partial_credit)
    if p.budget > 0 and value:
        value *= 1.0 - p.discount * min(1.0, episode_critical_steps(ep) / p.budget)
    return on_last(ep, value)


@register_component("r_parallel", ParallelParams, envs={"swarm"}, proxy=True)
def r_parallel(ep: Episode, p: ParallelParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """Sub-agents instantiated, normalised: ``min(n, max_subagents) / max_subagents``,
    earned on the steps that spawned them (Kimi K2.5, against serial collapse).

    >>> from rewards.synthetic import episode
    >>> ep = episode("swarm", [{"spawned": ["a", "b"]}, {}, {"spawned": ["c", "d", "e"]},
    ...                        {}], num_subagents=5)
    >>> r_parallel(ep, ParallelParams(max_subagents=4))
    (0.5, 0.0, 0.5, 0.0)
    """
    n = min(num_subagents(ep), p.max_subagents)
    # Each spawn is a new sub-agent, even a retry of the same subtask.
    spawned = [as_count(s.facts.get("spawned")) for s in ep.steps]
    return spread_counts(ep, spawned, n, p.max_subagents)


@register_component("r_finish", FinishParams, envs={"swarm"})
def r_finish(ep: Episode, p: FinishParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """Completed / assigned subtasks (0 when none were assigned), earned on the steps
    that completed them: sub-agents only pay when their work gets done (Kimi K2.5,
    against spurious parallelism).

    >>> from rewards.synthetic import episode
    >>> ep = episode("swarm", [{}, {"completed": ["a", "b"]}, {"completed": ["b", "c"]},
    ...                        {}], subtasks_assigned=4, subtasks_completed=3)
    >>> r_finish(ep, FinishParams())
    (0.0, 0.5, 0.25, 0.0)
    """
    assigned = as_count(ep.facts.get("subtasks_assigned"))
    if assigned == 0:
        return on_last(ep, 0.0)
    done = min(as_count(ep.facts.get("subtasks_completed")), assigned)
    # The swarm env's step facts list completed subtasks cumulatively: count new ones.
    return spread_counts(ep, new_items(ep, "completed"), done, assigned)


def stage_metrics(ep: Episode) -> dict[str, float]:
    """Per-episode orchestration metrics (empty for episodes without ``stages``):
    ``critical_steps``, ``total_steps``, ``parallelism`` (see :func:`parallelism`),
    ``subagents`` (per task), ``finish_rate`` (completed / assigned, 0 if none),
    ``subagent_yield`` (completed / sub-agents spawned, absent without sub-agents),
    ``serial`` (1.0 when it completed subtasks and no stage ran two sub-agents at
    once: all its work done one at a time, by sub-agents or by the orchestrator)."""
    if ep.facts.get("stages") is None:
        return {}
    stages = stages_from_facts(ep.facts)
    assigned = as_count(ep.facts.get("subtasks_assigned"))
    done = min(as_count(ep.facts.get("subtasks_completed")), assigned)
    return {
        "critical_steps": float(sum(o + max(s, default=0) for o, s in stages)),
        "total_steps": float(sum(o + sum(s) for o, s in stages)),
        "parallelism": parallelism(stages),
        "subagents": float(num_subagents(ep)),
        "finish_rate": done / assigned if assigned else 0.0,
        # Subtasks completed per sub-agent spawned: low when most sub-agents are
        # redundant, blocked or failed (spawned for the reward, not for the work).
        **({"subagent_yield": done / num_subagents(ep)} if num_subagents(ep) else {}),
        "serial": float(done > 0 and max((len(s) for _, s in stages), default=0) <= 1),
    }
