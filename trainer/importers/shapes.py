"""The events a converter builds from another trainer's text-only records.

A text-only trajectory (verl dumps, TRL's logged completions) has no token arrays: its
segments are one ``prompt`` segment (masked, ``mask="prompt"``) and one ``action``
segment (trained on, ``mask=None``), each with its ``text`` and empty arrays, exactly
the segment shape documented in :mod:`trainer.events`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trainer.algorithms import group_advantages

ARRAYS = (
    "token_ids",
    "tokens",
    "logprob",
    "old_logprob",
    "ratio",
    "entropy",
    "advantage",
)


def text_segment(kind: str, text: str) -> dict[str, Any]:
    seg: dict[str, Any] = {"turn": 0, "kind": kind, "text": text}
    seg.update({name: [] for name in ARRAYS})
    seg["mask"] = "prompt" if kind == "prompt" else None
    return seg


def chat_text(value: Any) -> str:
    """A prompt or completion as text: a string, or chat messages as ``role: content``
    lines (text parts only), as TRL keeps them for conversational datasets."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        lines = []
        for message in value:
            if not isinstance(message, dict):
                lines.append(str(message))
                continue
            content = message.get("content", "")
            if isinstance(content, list):
                content = "".join(
                    part.get("text", "") for part in content if isinstance(part, dict)
                )
            lines.append(f"{message.get('role', '')}: {content}")
        return "\n".join(lines)
    return str(value)


def task_id_for(prompt: str) -> str:
    """A stable id for a prompt (siblings of a group share it)."""
    return "p-" + hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:12]


def text_trajectory(
    *,
    step: int,
    group: int,
    index: int,
    prompt: str,
    completion: str,
    reward: float,
    components: Mapping[str, float],
    advantage: float,
    length: int = 0,
    facts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``trajectory`` event. ``length`` is the completion's token count when the
    source knows it (0 when it does not)."""
    return {
        "type": "trajectory",
        "step": int(step),
        "group": int(group),
        "index": int(index),
        "task_id": task_id_for(prompt),
        "dropped": False,
        "reward": float(reward),
        "advantage": float(advantage),
        "rewards": {
            "total": float(reward),
            "components": {k: float(v) for k, v in components.items()},
            "per_step": {},
        },
        "num_turns": 1,
        "length": int(length),
        "truncated": False,
        "facts": dict(facts or {}),
        "segments": [
            text_segment("prompt", prompt),
            text_segment("action", completion),
        ],
    }


def group_by_prompt(prompts: Sequence[str]) -> list[tuple[int, int]]:
    """(group, index) of each row: siblings share an identical prompt; groups are
    numbered by first appearance, indices in order within the group."""
    groups: dict[str, int] = {}
    counts: list[int] = []
    out = []
    for prompt in prompts:
        if prompt not in groups:
            groups[prompt] = len(groups)
            counts.append(0)
        g = groups[prompt]
        out.append((g, counts[g]))
        counts[g] += 1
    return out


def grpo_advantages(rewards: Sequence[float], groups: Sequence[int]) -> list[float]:
    """GRPO advantage of each row within its group (reward minus the group mean over
    the group std, :func:`trainer.algorithms.group_advantages`); 0 for a row alone in
    its group (no spread to compare with) and NaN where a reward is not a number."""
    members: dict[int, list[int]] = {}
    for row, g in enumerate(groups):
        members.setdefault(g, []).append(row)
    out = [0.0] * len(rewards)
    for rows in members.values():
        values = [float(rewards[r]) for r in rows]
        if len(rows) < 2:
            continue
        if not all(math.isfinite(v) for v in values):
            for r in rows:
                out[r] = float("nan")
            continue
        adv = group_advantages(torch.tensor(values), len(rows))
        for r, a in zip(rows, adv.tolist(), strict=True):
            out[r] = a
    return out
