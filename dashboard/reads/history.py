"""A task's history (issue 12.3): one task id followed across a run's training, per
recorded step its group's mean and best reward, each rollout's reward and advantage
(links to the rollouts), and the same task in several runs side by side (compare).

Reads stored trajectories only (what the recording policy kept); a step where the
task was sampled but not recorded is absent. Knows nothing of views or templates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dashboard.models import Run, Trajectory

MAX_STEPS = 2000  # the latest recorded steps of a task a page shows


@dataclass
class Rollout:
    index: int
    reward: float | None
    advantage: float | None
    length: int


@dataclass
class TaskStep:
    """The task's group at one step (a task sampled twice in a step: two rows)."""

    step: int
    group: int
    dropped: bool
    rollouts: list[Rollout] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.rollouts if _finite(r.reward)]

    @property
    def mean_reward(self) -> float | None:
        xs = self.rewards
        return sum(xs) / len(xs) if xs else None

    @property
    def best(self) -> Rollout | None:
        scored = [r for r in self.rollouts if _finite(r.reward)]
        return max(scored, key=lambda r: (r.reward, -r.index), default=None)

    @property
    def best_reward(self) -> float | None:
        best = self.best
        return best.reward if best is not None else None

    @property
    def advantages(self) -> list[float | None]:
        return [r.advantage for r in self.rollouts]

    @property
    def zero_variance(self) -> bool:
        xs = self.rewards
        return len(xs) > 1 and max(xs) - min(xs) <= 1e-6


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def task_history(run: Run, task_id: str, limit: int = MAX_STEPS) -> list[TaskStep]:
    """The task's recorded groups, oldest first (the latest ``limit`` steps)."""
    steps = list(
        Trajectory.objects.filter(run=run, task_id=task_id)
        .order_by("-step")
        .values_list("step", flat=True)
        .distinct()[:limit]
    )
    if not steps:
        return []
    rows = (
        Trajectory.objects.filter(run=run, task_id=task_id, step__gte=min(steps))
        .order_by("step", "group", "index")
        .values_list(
            "step", "group", "index", "reward", "advantage", "length", "dropped"
        )
    )
    out: list[TaskStep] = []
    for step, group, index, reward, advantage, length, dropped in rows:
        if not out or (out[-1].step, out[-1].group) != (step, group):
            out.append(TaskStep(step, group, bool(dropped)))
        out[-1].rollouts.append(Rollout(index, reward, advantage, length))
    return out


def series(history: Sequence[TaskStep]) -> dict[str, dict[str, list[Any]]]:
    """The history as chart series (``{key: {"step": [...], "last": [...]}}``, the
    shape of ``/api/runs/{id}/metrics``): mean and best reward, and the smallest and
    largest advantage, per step (a step with two groups: the first)."""
    seen: dict[int, TaskStep] = {}
    for ts in history:
        seen.setdefault(ts.step, ts)
    steps = sorted(seen)

    def col(fn: Any) -> dict[str, list[Any]]:
        return {"step": steps, "last": [_json(fn(seen[s])) for s in steps]}

    def adv(ts: TaskStep, pick: Any) -> float | None:
        xs = [a for a in ts.advantages if _finite(a)]
        return pick(xs) if xs else None

    return {
        "mean_reward": col(lambda ts: ts.mean_reward),
        "best_reward": col(lambda ts: ts.best_reward),
        "advantage_max": col(lambda ts: adv(ts, max)),
        "advantage_min": col(lambda ts: adv(ts, min)),
    }


def _json(v: float | None) -> float | None:
    return v if _finite(v) else None


def task_exists(run: Run, task_id: str) -> bool:
    return Trajectory.objects.filter(run=run, task_id=task_id).exists()
