"""Reading environment facts defensively: sets of ids, counts, finite numbers, stages.

Facts are JSON written by environments (and, through them, shaped by the policy), so
rewards read them through these helpers instead of trusting types. Stage timelines come
in two spellings, both accepted everywhere: ``(orchestrator_steps, [sub-agent steps])``
and the swarm environment's ``{"orchestrator_steps": int, "subagents": [{"steps": int,
...}]}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

Stage = tuple[int, list[int]]


def as_set(value: Any) -> frozenset[str]:
    """Document ids as a set of strings; anything that is not a collection is empty.

    >>> sorted(as_set(["d1", "d2", "d1"])), as_set(None)
    (['d1', 'd2'], frozenset())
    """
    if isinstance(value, list | tuple | set | frozenset):
        return frozenset(str(v) for v in value)
    return frozenset()


def as_count(value: Any) -> int:
    """A non-negative count from an int, a finite float or a list (its length).

    >>> as_count(3), as_count(["a", "b"]), as_count(-1), as_count(float("nan"))
    (3, 2, 0, 0)
    """
    if isinstance(value, list | tuple | set | frozenset):
        return len(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return max(0, int(value))
    return 0


def as_float(value: Any, default: float = 0.0) -> float:
    """A finite float, or ``default`` for anything else (NaN, strings, None).

    >>> as_float(True), as_float("x"), as_float(float("inf"), -1.0)
    (1.0, 0.0, -1.0)
    """
    if isinstance(value, bool | int | float) and math.isfinite(value):
        return float(value)
    return default


def _steps(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: expected a non-negative int, got {value!r}")
    return value


def normalize_stage(stage: Any, i: int = 0) -> Stage:
    """One stage as ``(orchestrator_steps, [sub-agent steps, ...])``.

    >>> normalize_stage({"orchestrator_steps": 1, "subagents": [{"steps": 4}]})
    (1, [4])
    """
    if isinstance(stage, Mapping):
        orch = _steps(
            stage.get("orchestrator_steps", 0), f"stages[{i}].orchestrator_steps"
        )
        subs = stage.get("subagents") or []
        if not isinstance(subs, Sequence) or isinstance(subs, str):
            raise ValueError(f"stages[{i}].subagents: expected a list")
        return orch, [
            _steps(
                s.get("steps") if isinstance(s, Mapping) else s,
                f"stages[{i}].subagents[{j}]",
            )
            for j, s in enumerate(subs)
        ]
    if isinstance(stage, Sequence) and not isinstance(stage, str) and len(stage) == 2:
        orch, subs = stage
        if not isinstance(subs, Sequence) or isinstance(subs, str):
            raise ValueError(f"stages[{i}]: sub-agent steps must be a list")
        return _steps(orch, f"stages[{i}][0]"), [
            _steps(s, f"stages[{i}][1][{j}]") for j, s in enumerate(subs)
        ]
    raise ValueError(f"stages[{i}]: expected (orchestrator_steps, [steps]) or a dict")


def normalize_stages(stages: Any) -> list[Stage]:
    """Every stage normalised; raises ValueError naming the bad entry."""
    if stages is None:
        return []
    if not isinstance(stages, Sequence) or isinstance(stages, str):
        raise ValueError("stages: expected a list of stages")
    return [normalize_stage(s, i) for i, s in enumerate(stages)]


def stage_widths(stages: Any) -> list[int]:
    """Sub-agents per stage; ``[]`` for a malformed timeline (rubric checks only read).

    >>> stage_widths([(1, [3, 4]), (1, [])])
    [2, 0]
    """
    try:
        return [len(subs) for _, subs in normalize_stages(stages)]
    except ValueError:
        return []


def repetition(actions: Sequence[str], n: int = 2) -> float | None:
    """Share of an episode's word ``n``-grams that repeat one seen before in it (each
    action its own sequence, counted over the episode): 0 for varied text, towards
    1 for degenerate output (one call over and over, one word padded out). None
    when the actions hold no ``n``-gram at all.

    >>> repetition(["calc 3 + 4", "answer 7"])
    0.0
    >>> round(repetition(["calc 3 + 4"] * 3), 3), repetition(["answer 7 7 7 7 7"])
    (0.667, 0.6)
    >>> repetition(["finish"]) is None
    True
    """
    grams = [
        tuple(words[i : i + n])
        for words in (str(a).split() for a in actions)
        for i in range(len(words) - n + 1)
    ]
    if not grams:
        return None
    return 1.0 - len(set(grams)) / len(grams)
