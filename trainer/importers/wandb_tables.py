"""Tables logged to W&B -> our trajectory events.

A logged ``wandb.Table`` appears in a history row as a reference (``{"_type":
"table-file", "path": "media/table/<key>_<step>_<hash>.table.json", ...}``) to a JSON
file ``{"columns": [...], "data": [[...], ...]}`` under the run's ``files/``. Two
shapes are trajectories:

* **TRL's completions table** (``GRPOTrainer.log``, TRL 1.16): one row per
  completion, columns ``step`` (the global step), ``prompt``, ``completion``, one
  column per reward function, any extra columns its reward functions logged,
  ``advantage`` and, for images, ``image``. Which number columns are the reward
  components, and the reward (their sum weighted by the run config's
  ``reward_weights``, NaN ignored as TRL does): :mod:`trainer.importers.completions`,
  the rule every reader of TRL's table shares.
* **verl's validation generations** (``ValidationGenerationsLogger``, key
  ``val/generations``): one row per validation, columns ``step``, then ``input_i``,
  ``output_i``, ``score_i`` for each sample. Each logged table repeats the rows of the
  validations before it; the reader skips steps it already sent.

Siblings are the rows of one step with an identical prompt (one group each); groups
are numbered after those the step already has. Other tables are not trajectories.
Pure: no Django, no wandb.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainer.importers.completions import column_weights, reward_columns, row_reward
from trainer.importers.shapes import (
    chat_text,
    group_by_prompt,
    grpo_advantages,
    text_trajectory,
)

TRL_TEXT = ("prompt", "completion")
TRL_SKIP = {"step", "prompt", "completion", "advantage", "image"}
_WIDE = re.compile(r"^(input|output|score)_(\d+)$")


@dataclass(frozen=True)
class Sample:
    """One completion of a table, before it is numbered into a group."""

    step: int
    prompt: str
    completion: str
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    advantage: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)  # when not 1 each


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_step(value: Any) -> int | None:
    """A whole, non-negative step our events can hold, else None."""
    if not is_number(value) or not math.isfinite(value) or value != int(value):
        return None
    step = int(value)
    return step if 0 <= step < 2**31 else None


def samples(
    table: dict[str, Any],
    *,
    step: int,
    weights: Any = None,
    logged: Iterable[str] = (),
) -> list[Sample]:
    """The completions of a table's JSON (``[]`` for a table that holds none);
    ``step`` is the history row's, used where the table has no ``step`` column;
    ``logged`` the reward names the run's history holds (``rewards/<name>/mean``)."""
    columns = [str(c) for c in table.get("columns") or []]
    rows = [
        dict(zip(columns, row, strict=False))
        for row in table.get("data") or []
        if isinstance(row, list)
    ]
    if all(c in columns for c in TRL_TEXT):
        names = reward_columns(columns, rows, weights=weights, logged=logged)
        return [_trl_sample(row, columns, names, step, weights) for row in rows]
    if any(_WIDE.match(c) for c in columns):
        return [s for row in rows for s in _wide_samples(row, columns, step)]
    return []


def is_cumulative(table: dict[str, Any]) -> bool:
    """Whether each logged copy repeats the rows before it (verl's validation
    generations), so a step already sent is skipped; a TRL table is each step's own
    (and TRL logs another at the same step for evaluation)."""
    columns = [str(c) for c in table.get("columns") or []]
    return not all(c in columns for c in TRL_TEXT) and any(map(_WIDE.match, columns))


def _trl_sample(
    row: dict[str, Any], columns: list[str], names: list[str], step: int, weights: Any
) -> Sample:
    components, reward = row_reward(row, names, weights)
    weighs = column_weights(names, weights)
    facts = {
        c: row[c]
        for c in columns
        if c not in TRL_SKIP and c not in names and _plain(row.get(c))
    }
    advantage, at = row.get("advantage"), as_step(row.get("step"))
    return Sample(
        step=step if at is None else at,
        prompt=chat_text(row.get("prompt", "")),
        completion=chat_text(row.get("completion", "")),
        reward=reward,
        components=components,
        advantage=float(advantage) if is_number(advantage) else None,
        facts=facts,
        weights={k: w for k, w in weighs.items() if k in components},
    )


def _wide_samples(row: dict[str, Any], columns: list[str], step: int) -> list[Sample]:
    at = as_step(row.get("step"))
    indices = sorted({int(m.group(2)) for c in columns if (m := _WIDE.match(c))})
    out = []
    for i in indices:
        score = row.get(f"score_{i}")
        out.append(
            Sample(
                step=at if at is not None else step,
                prompt=chat_text(row.get(f"input_{i}", "")),
                completion=chat_text(row.get(f"output_{i}", "")),
                reward=float(score) if is_number(score) else math.nan,
                facts={"split": "validation"},
            )
        )
    return out


def _plain(value: Any) -> bool:
    """A cell worth keeping as a fact: text, a flag, or plain JSON (not media)."""
    if isinstance(value, dict):
        return "_type" not in value
    return value is not None


def trajectories(
    found: list[Sample], groups_at: dict[int, int]
) -> list[dict[str, Any]]:
    """Trajectory events of ``found``: per step, siblings by identical prompt, groups
    numbered from ``groups_at[step]`` (which this advances); the advantage TRL logged,
    else GRPO's within the group."""
    by_step: dict[int, list[Sample]] = {}
    for sample in found:
        by_step.setdefault(sample.step, []).append(sample)
    events = []
    for step, rows in by_step.items():
        places = group_by_prompt([s.prompt for s in rows])
        first = groups_at.get(step, 0)
        computed = grpo_advantages([s.reward for s in rows], [g for g, _ in places])
        for row, sample in enumerate(rows):
            group, index = places[row]
            advantage = sample.advantage
            events.append(
                text_trajectory(
                    step=step,
                    group=first + group,
                    index=index,
                    prompt=sample.prompt,
                    completion=sample.completion,
                    reward=sample.reward,
                    components=sample.components,
                    advantage=computed[row] if advantage is None else advantage,
                    facts=sample.facts,
                    weights=sample.weights,
                )
            )
        groups_at[step] = first + len({g for g, _ in places})
    return events
