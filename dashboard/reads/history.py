"""A task's history (issue 12.3): one task id followed across a run's training, per
recorded step its group's mean and best reward, each rollout's reward and advantage
(links to the rollouts), and the same task in several runs side by side (compare).

Also the task's prompt, by turn, as its latest recorded rollout was given it. Reads
stored trajectories only (what the recording policy kept); a step where the
task was sampled but not recorded is absent. Knows nothing of views or templates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dashboard.ingest import prompts
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


# --- the task's prompt ----------------------------------------------------------------
PROMPT_CHARS = 20_000  # of a prompt shown on the task page
# A message's header in the common chat templates (ChatML, Llama 3, Gemma, Phi-3)...
_OPENS = re.compile(
    r"(?:<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>)[ \t]*"
    r"(system|developer|user|assistant|model|tool|ipython)[ \t]*"
    r"(?:<\|end_header_id\|>)?[ \t]*\n?"
    r"|<\|(system|user|assistant|tool)\|>\n?"
)
# ...and the special tokens around messages, which say nothing themselves.
_MARKERS = re.compile(
    r"<\|(?:im_end|eot_id|end|endoftext|begin_of_text)\|>|<end_of_turn>|<bos>|<s>|</s>"
)
_ROLE = {"developer": "system", "model": "assistant", "ipython": "tool"}


@dataclass(frozen=True)
class PromptTurn:
    role: str
    text: str


def prompt_turns(text: str, role: str = "user") -> list[PromptTurn]:
    """A rendered prompt read back as its messages: a turn at each chat-template
    header, the markers left out; a prompt with no header is one ``role`` turn.
    Turns that say nothing (the generation prompt's bare ``assistant``) are dropped.

    >>> prompt_turns("<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\n"
    ...              "2+2?<|im_end|>\\n<|im_start|>assistant\\n")
    [PromptTurn(role='system', text='Be brief.'), PromptTurn(role='user', text='2+2?')]
    """
    turns, start = [], 0
    for m in _OPENS.finditer(text):
        turns.append((role, text[start : m.start()]))
        name = m.group(1) or m.group(2)
        role, start = _ROLE.get(name, name), m.end()
    turns.append((role, text[start:]))
    out = []
    for r, body in turns:
        said = _MARKERS.sub("", body).strip()
        if said:
            out.append(PromptTurn(r, said))
    return out


def task_prompt(run: Run, task_id: str) -> list[PromptTurn]:
    """The task's prompt as its latest recorded rollout was given it (that rollout's
    leading ``prompt`` segments, by turn); empty when none was recorded."""
    t = (
        Trajectory.objects.filter(run=run, task_id=task_id)
        .order_by("-step", "group", "index")
        .first()
    )
    if t is None:
        return []
    text = ""
    for seg in prompts.meta_of(t):
        if not isinstance(seg, dict) or seg.get("kind") != "prompt":
            break
        text += str(seg.get("text") or "")
    return prompt_turns(text[:PROMPT_CHARS])
