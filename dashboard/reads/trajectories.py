"""Trajectories of a run: a step's groups, one trajectory with its judgements and
critical path, a task across steps and runs; and their JSON."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dashboard import jsonsafe
from dashboard.ingest import prompts
from dashboard.models import (
    CriticalPath,
    Judgement,
    Run,
    Trajectory,
)
from dashboard.reads.metrics import finite


# --- rows as JSON ----------------------------------------------------------------------
def trajectory_summary(t: Trajectory) -> dict[str, Any]:
    return {
        "step": t.step,
        "group": t.group,
        "index": t.index,
        "task_id": t.task_id,
        "dropped": t.dropped,
        "reward": jsonsafe.num(t.reward),  # None (none given) stays null
        "advantage": jsonsafe.num(t.advantage),
        "num_turns": t.num_turns,
        "length": t.length,
        "truncated": t.truncated,
        "rewards": t.rewards,
    }


def trajectory_detail(
    t: Trajectory, prompt_cache: dict | None = None
) -> dict[str, Any]:
    """A trajectory as sent: its segments with their per-token arrays decoded, the
    group's shared prompt first (``prompt_cache``: reuse one read per group)."""
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["segments"] = prompts.segments_of(t, prompt_cache)
    return out


def trajectory_text(t: Trajectory, prompt_cache: dict | None = None) -> dict[str, Any]:
    """:func:`trajectory_detail` without the per-token ids and floats (segments keep
    their text, tokens and mask)."""
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["segments"] = [
        {k: v for k, v in seg.items() if k != "n"}
        for seg in prompts.meta_of(t, prompt_cache)
    ]
    return out


def judgement_dict(j: Judgement) -> dict[str, Any]:
    return {
        "step": j.step,
        "group": j.group,
        "index": j.index,
        "judge": j.judge,
        "backend": j.backend,
        "ok": j.ok,
        "score": None if j.score is None else jsonsafe.num(j.score),
        "scores": j.scores,
        "rationale": j.rationale,
        "raw": j.raw,
        "error": j.error,
        "target_step": j.target_step,
    }


def judgement_summary(j: Judgement) -> dict[str, Any]:
    """What a frame says of a judgement (``dashboard.ingest.fields.summarise``)."""
    return {
        "step": j.step,
        "group": j.group,
        "index": j.index,
        "judge": j.judge,
        "ok": j.ok,
        "score": None if j.score is None else jsonsafe.num(j.score),
    }


def critical_path_dict(c: CriticalPath) -> dict[str, Any]:
    return {
        "step": c.step,
        "group": c.group,
        "index": c.index,
        "stages": c.stages,
        "critical_steps": c.critical_steps,
        "total_steps": c.total_steps,
        "path": c.path,
    }


def trajectory_steps(run: Run) -> list[int]:
    """Steps that have stored trajectories, ascending."""
    return list(
        Trajectory.objects.filter(run=run)
        .order_by("step")
        .values_list("step", flat=True)
        .distinct()
    )


def nearest(steps: Sequence[int], step: int | None) -> int | None:
    """The stored step closest to ``step`` (the latest when None; ties go earlier)."""
    if not steps:
        return None
    if step is None:
        return steps[-1]
    return min(steps, key=lambda s: (abs(s - step), s))


# --- a step's trajectories --------------------------------------------------------------
@dataclass
class Group:
    group: int
    task_id: str
    dropped: bool
    rollouts: list[Trajectory]
    hidden: int = 0


def _num(params: Any, name: str) -> float | None:
    try:
        value = float(params.get(name, ""))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def step_groups(run: Run, step: int, params: Any) -> list[Group]:
    """The step's groups, each with its rollouts that pass the filters."""
    rows = (
        Trajectory.objects.filter(run=run, step=step)
        .defer("segments", "arrays", "facts", "agent_steps")
        .order_by("group", "index")
    )
    lo, hi = _num(params, "reward_min"), _num(params, "reward_max")
    len_lo, len_hi = _num(params, "length_min"), _num(params, "length_max")
    sign = params.get("sign") or ""
    dropped = params.get("dropped") or ""
    groups: dict[int, Group] = {}
    for t in rows:
        g = groups.setdefault(t.group, Group(t.group, t.task_id, t.dropped, []))
        g.dropped = g.dropped or t.dropped
        if _keep(t, lo, hi, len_lo, len_hi, sign, dropped):
            g.rollouts.append(t)
        else:
            g.hidden += 1
    return [g for g in groups.values() if g.rollouts]


def _keep(t: Trajectory, lo, hi, len_lo, len_hi, sign: str, dropped: str) -> bool:
    r, a = finite(t.reward), finite(t.advantage)
    if lo is not None and (r is None or r < lo):
        return False
    if hi is not None and (r is None or r > hi):
        return False
    if len_lo is not None and t.length < len_lo:
        return False
    if len_hi is not None and t.length > len_hi:
        return False
    if sign == "pos" and not (a is not None and a > 0):
        return False
    if sign == "neg" and not (a is not None and a < 0):
        return False
    if sign == "zero" and not (a is not None and a == 0):
        return False
    if dropped == "only" and not t.dropped:
        return False
    return not (dropped == "hide" and t.dropped)


def advantage_histogram(run: Run, step: int, bins: int = 20) -> dict[str, Any]:
    """Counts of the step's trajectory advantages in ``bins`` equal bins."""
    values = [
        v
        for v in Trajectory.objects.filter(
            run=run, step=step, dropped=False
        ).values_list("advantage", flat=True)
        if v is not None and math.isfinite(v)
    ]
    if not values:
        return {"step": step, "edges": [], "counts": []}
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {
        "step": step,
        "edges": [lo + i * width for i in range(bins + 1)],
        "counts": counts,
    }


def judgements_for(run: Run, step: int, group: int, index: int) -> list[Judgement]:
    return list(
        Judgement.objects.filter(run=run, step=step, group=group, index=index).order_by(
            "judge"
        )
    )


def critical_path_for(
    run: Run, step: int, group: int, index: int
) -> CriticalPath | None:
    return CriticalPath.objects.filter(
        run=run, step=step, group=group, index=index
    ).first()


def critical_paths(run: Run, step: int, limit: int = 500) -> list[CriticalPath]:
    return list(
        CriticalPath.objects.filter(run=run, step=step).order_by("group", "index")[
            :limit
        ]
    )


# --- compare --------------------------------------------------------------------------
def common_tasks(runs: Sequence[Run], limit: int = 50) -> list[str]:
    """Task ids every run has trajectories for, earliest first (same seed, same tasks)."""
    common: dict[str, int] | None = None
    for run in runs:
        firsts: dict[str, int] = {}
        rows = (
            Trajectory.objects.filter(run=run)
            .exclude(task_id="")
            .values_list("task_id", "step")
            .order_by("step")[:20000]
        )
        for task, step in rows:
            firsts.setdefault(task, step)
        if common is None:
            common = firsts
        else:
            common = {t: min(s, firsts[t]) for t, s in common.items() if t in firsts}
    return [
        t for t, _ in sorted((common or {}).items(), key=lambda kv: (kv[1], kv[0]))
    ][:limit]


@dataclass
class TaskColumn:
    run: Run
    step: int | None
    rollouts: list[Trajectory]
    best: Trajectory | None


def task_trajectories(
    runs: Sequence[Run], task: str, per_run: int = 16
) -> list[TaskColumn]:
    """Per run, the rollouts of ``task`` at the first step it was sampled."""
    columns = []
    for run in runs:
        first = (
            Trajectory.objects.filter(run=run, task_id=task)
            .order_by("step")
            .values_list("step", flat=True)
            .first()
        )
        rollouts = []
        if first is not None:
            rollouts = list(
                Trajectory.objects.filter(run=run, task_id=task, step=first)
                .defer("segments", "arrays", "facts", "agent_steps")
                .order_by("group", "index")[:per_run]
            )
        best = max(
            rollouts, key=lambda t: finite(t.reward) or float("-inf"), default=None
        )
        columns.append(TaskColumn(run, first, rollouts, best))
    return columns
