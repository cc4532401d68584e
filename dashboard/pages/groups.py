"""Group browser additions (issue 12): what a step's group of G siblings shares and
where it splits. Per group: zero reward variance (``trainer.algorithms``' test, the one
DAPO's filter uses) and whether the siblings acted alike: the first agent turn whose
action differs, compared on the recorded agent steps or, for a text-only rollout (an
imported or streamed TRL run has no agent steps), on the completions' text (issue
22.10); rollouts sorted by advantage, reward or length on request."""

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


def completion_turns(segments: Any) -> list[str]:
    """A rollout's generated text per turn (its ``action`` segments joined), for
    rollouts recorded without agent steps."""
    turns: dict[int, list[str]] = {}
    for seg in segments or []:
        if isinstance(seg, dict) and seg.get("kind") == "action":
            turn = seg.get("turn") if isinstance(seg.get("turn"), int) else 0
            turns.setdefault(turn, []).append(str(seg.get("text") or ""))
    return ["".join(turns[t]) for t in sorted(turns)]


def likeness(actions: list[list[str]], what: str) -> str:
    """How a group's siblings compare, as the group head says it: ``what`` is
    ``actions`` (agent steps) or ``completions`` (text)."""
    n = len(actions)
    if n < 2:
        return "one rollout"
    if not any(actions):
        return "no actions recorded"
    turn = first_divergence(actions)
    if turn is None:
        return f"identical {what}"
    distinct = len({tuple(a) for a in actions})
    noun = "completions" if what == "completions" else "action sequences"
    longest = max(len(a) for a in actions)
    where = "" if longest == 1 else f", diverge at turn {turn}"
    return f"{distinct} distinct {noun} of {n}{where}"


def _members(run: Run, step: int) -> dict[int, list[tuple[float, list[str]]]]:
    by_group: dict[int, list[tuple[float, list[str]]]] = {}
    rows = Trajectory.objects.filter(run=run, step=step).order_by("group", "index")
    for g, reward, steps in rows.values_list("group", "reward", "agent_steps"):
        actions = [
            str(s.get("action", "")) for s in (steps or []) if isinstance(s, dict)
        ]
        r = reward if reward is not None and math.isfinite(reward) else 0.0
        by_group.setdefault(g, []).append((r, actions))
    return by_group


def _completions(run: Run, step: int, groups: list[int]) -> dict[int, list[list[str]]]:
    """The completions' text of ``groups`` (read only for groups without agent steps:
    segments are the heavy column)."""
    out: dict[int, list[list[str]]] = {}
    rows = Trajectory.objects.filter(run=run, step=step, group__in=groups)
    for g, segments in rows.order_by("group", "index").values_list("group", "segments"):
        out.setdefault(g, []).append(completion_turns(segments))
    return out


def annotate(run: Run, step: int, groups: list[Any], sort: str = "") -> None:
    """Set ``zero_variance``, ``diverge_turn`` and ``likeness`` on each group; sort
    its rollouts."""
    from trainer.algorithms import zero_variance_groups

    by_group = _members(run, step)
    textual = [g for g, m in by_group.items() if not any(a for _, a in m)]
    texts = _completions(run, step, textual) if textual else {}
    for grp in groups:
        members = by_group.get(grp.group, [])
        rewards = torch.tensor([r for r, _ in members], dtype=torch.float32)
        grp.zero_variance = len(members) > 1 and bool(
            zero_variance_groups(rewards, len(members))[0]
        )
        if grp.group in texts:
            actions, what = texts[grp.group], "completions"
        else:
            actions, what = [a for _, a in members], "actions"
        grp.diverge_turn = first_divergence(actions) if len(actions) > 1 else None
        grp.likeness = likeness(actions, what)
        grp.identical = len(actions) > 1 and any(actions) and grp.diverge_turn is None
        key = SORTS.get(sort)
        if key:
            grp.rollouts.sort(key=lambda t: _finite(getattr(t, key)), reverse=True)


def _finite(v: Any) -> float:
    return v if isinstance(v, (int, float)) and math.isfinite(v) else -math.inf
