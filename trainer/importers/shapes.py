"""The events a converter builds from another trainer's records.

A text-only trajectory (verl dumps, TRL's logged completions) has no token arrays: its
segments are one ``prompt`` segment (masked, ``mask="prompt"``) and one ``action``
segment (trained on, ``mask=None``), each with its ``text`` and empty arrays, exactly
the segment shape documented in :mod:`trainer.events`.

A layout that keeps per-token arrays (prime-rl's episodes and token exports, miles's
dumps) builds its segments with :func:`token_segment`, the arrays aligned to
``token_ids``. What each array means here, whatever a trainer calls it:

* ``logprob``: the trainer's (learner's) log-prob of the token;
* ``old_logprob``: the sampler's (inference engine's) log-prob, the one the token
  was drawn with;
* ``ratio``: the importance ratio trainer / sampler, ``exp(logprob - old_logprob)``:
  the per-token train/inference mismatch (prime-rl's ``mismatch_kl`` is
  ``ratio - log(ratio) - 1`` of it);
* ``entropy`` and ``advantage``: as in our own runs.

Per-token arrays a trainer keeps beyond these (prime-rl's ``mismatch_kl``,
``log_importance_ratio``, ``is_masked*``; miles's ``ref_log_probs``, ``returns``,
``ref_entropy``) go under the segment's ``series``, by the trainer's own names
(flags as 1/0), so the trajectory page can colour tokens by them.

``None`` marks a value the source does not have for that token.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
                    str(part.get("text", ""))
                    for part in content
                    if isinstance(part, dict)
                )
            lines.append(f"{message.get('role', '')}: {content}")
        return "\n".join(lines)
    return str(value)


def task_id_for(prompt: str) -> str:
    """A stable id for a prompt (siblings of a group share it). A lone surrogate (JSON's
    ``"\\ud800"``: no UTF-8) counts as the ``?`` the stored text has in its place."""
    data = prompt.encode("utf-8", "replace")
    return "p-" + hashlib.sha1(data).hexdigest()[:12]


def token_segment(
    kind: str,
    text: str,
    token_ids: Sequence[int],
    arrays: Mapping[str, Sequence[float | None] | None],
    *,
    mask: str | None = None,
    series: Mapping[str, Sequence[float | bool | None] | None] | None = None,
) -> dict[str, Any]:
    """A segment with per-token arrays (names of :data:`ARRAYS`) aligned to
    ``token_ids``; an array the source lacks (``None``) stays empty. ``series``:
    the trainer's other per-token arrays by its names (those without a value for
    any of these tokens left out)."""
    seg = text_segment(kind, text)
    seg["token_ids"] = [int(t) for t in token_ids]
    for name, values in arrays.items():
        if name not in ARRAYS or name in ("token_ids", "tokens"):
            raise ValueError(f"arrays: {name!r} is not a per-token float array")
        if values is not None:
            seg[name] = _aligned(name, values, len(token_ids))
    extra = {
        name: _aligned(name, values, len(token_ids))
        for name, values in (series or {}).items()
        if values is not None and any(v is not None for v in values)
    }
    if extra:
        seg["series"] = extra
    seg["mask"] = mask
    return seg


def _aligned(
    name: str, values: Sequence[float | bool | None], n: int
) -> list[float | None]:
    if len(values) != n:
        raise ValueError(f"arrays: {name} has {len(values)} values for {n} tokens")
    return [_num(v) for v in values]


def _num(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class TrajectoryRow:
    """One trajectory of a foreign layout, in our terms. ``segments`` are built with
    :func:`text_segment` or :func:`token_segment`; ``task_id`` defaults to a hash of
    ``prompt`` (siblings of a group share it)."""

    step: int
    group: int
    index: int
    prompt: str
    segments: list[dict[str, Any]]
    reward: float
    advantage: float
    components: Mapping[str, float] = field(default_factory=dict)
    task_id: str | None = None
    length: int = 0
    num_turns: int = 1
    truncated: bool = False
    facts: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    per_step: Mapping[str, list[float]] = field(default_factory=dict)
    # What each component weighs in ``reward`` when the components are a trainer's
    # raw scores (TRL's reward functions, ``reward_weights``); empty: they add up.
    weights: Mapping[str, float] = field(default_factory=dict)


def trajectory_event(row: TrajectoryRow) -> dict[str, Any]:
    """One ``trajectory`` event (the shape of :mod:`trainer.events`)."""
    rewards: dict[str, Any] = {
        "total": float(row.reward),
        "components": {k: float(v) for k, v in row.components.items()},
        "per_step": {k: [float(x) for x in v] for k, v in row.per_step.items()},
    }
    if row.weights:
        rewards["weights"] = {k: float(v) for k, v in row.weights.items()}
    return {
        "type": "trajectory",
        "step": int(row.step),
        "group": int(row.group),
        "index": int(row.index),
        "task_id": row.task_id or task_id_for(row.prompt),
        "dropped": False,
        "reward": float(row.reward),
        "advantage": float(row.advantage),
        "rewards": rewards,
        "num_turns": int(row.num_turns),
        "length": int(row.length),
        "truncated": bool(row.truncated),
        "facts": dict(row.facts),
        "metrics": {k: float(v) for k, v in row.metrics.items()},
        "segments": list(row.segments),
    }


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
    weights: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """One text-only ``trajectory`` event. ``length`` is the completion's token count
    when the source knows it (0 when it does not); ``weights``: what each of
    ``components`` (raw scores) weighs in ``reward``, when not 1 each."""
    event = trajectory_event(
        TrajectoryRow(
            step=step,
            group=group,
            index=index,
            prompt=prompt,
            segments=[
                text_segment("prompt", prompt),
                text_segment("action", completion),
            ],
            reward=reward,
            advantage=advantage,
            components=components,
            length=length,
            facts=facts or {},
            weights=weights or {},
        )
    )
    del event["metrics"]  # none: keep the text-only shape as it was
    return event


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


def step_events(
    framework: str,
    rows: Sequence[tuple[int, Mapping[str, Any]]],
    derived: Mapping[int, Mapping[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """``(step, {name: value})`` rows -> one ``step`` event per step (rows of the same
    step merged, steps in order of first appearance), names mapped through
    :func:`trainer.metric_names.map_metrics` and ``derived`` numbers added."""
    from trainer.metric_names import map_metrics

    merged: dict[int, dict[str, Any]] = {}
    for step, data in rows:
        merged.setdefault(int(step), {}).update(data)
    out = []
    for step, data in merged.items():
        metrics: dict[str, Any] = dict((derived or {}).get(step, {}))
        metrics.update(map_metrics(framework, data))
        if metrics:
            out.append({"type": "step", "step": step, "metrics": metrics})
    return out
