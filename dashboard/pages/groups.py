"""Group browser additions (issue 12): what a step's group of G siblings shares and
where it splits. Per group: zero reward variance (``trainer.algorithms``' test, the one
DAPO's filter uses) and the first agent turn whose action text differs between the
siblings; rollouts sorted by advantage, reward or length on request."""

from __future__ import annotations

import math
from typing import Any

import torch

from dashboard.models import Run, Trajectory

SORTS = {"advantage": "advantage", "reward": "reward", "length": "length"}


def first_divergence(actions: list[list[str]]) -> int | None:
    """The first turn whose action differs between siblings (one that stopped earlier
    differs from one that went on); None when all are identical."""
    longest = max((len(a) for a in actions), default=0)
    for turn in range(longest):
        seen = {a[turn] if turn < len(a) else None for a in actions}
        if len(seen) > 1:
            return turn
    return None


def annotate(run: Run, step: int, groups: list[Any], sort: str = "") -> None:
    """Set ``zero_variance`` and ``diverge_turn`` on each group; sort its rollouts."""
    from trainer.algorithms import zero_variance_groups

    by_group: dict[int, list[tuple[float, list[str]]]] = {}
    rows = Trajectory.objects.filter(run=run, step=step).order_by("group", "index")
    for g, reward, steps in rows.values_list("group", "reward", "agent_steps"):
        actions = [
            str(s.get("action", "")) for s in (steps or []) if isinstance(s, dict)
        ]
        r = reward if reward is not None and math.isfinite(reward) else 0.0
        by_group.setdefault(g, []).append((r, actions))
    for grp in groups:
        members = by_group.get(grp.group, [])
        rewards = torch.tensor([r for r, _ in members], dtype=torch.float32)
        grp.zero_variance = len(members) > 1 and bool(
            zero_variance_groups(rewards, len(members))[0]
        )
        grp.diverge_turn = first_divergence([a for _, a in members])
        key = SORTS.get(sort)
        if key:
            grp.rollouts.sort(key=lambda t: _finite(getattr(t, key)), reverse=True)


def _finite(v: Any) -> float:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else -math.inf
