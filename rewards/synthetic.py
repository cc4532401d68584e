"""Build small :class:`Episode` objects by hand, for docstring examples and tests.

Environments produce real episodes; this only spells the same facts tersely:
``episode("search", [{"tool": "search", "surfaced_gold": ["a"]}], gold=["a"])``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewards.types import Episode, StepFacts

_STEP_FIELDS = ("tool", "ok", "action", "observation")


def step(index: int, spec: Mapping[str, Any] | StepFacts) -> StepFacts:
    """A step from ``{"tool", "ok", "action", "observation", **facts}``.

    >>> step(0, {"tool": "prune", "pruned": ["d1"]}).facts
    {'pruned': ['d1']}
    """
    if isinstance(spec, StepFacts):
        return spec
    facts = {k: v for k, v in spec.items() if k not in _STEP_FIELDS}
    return StepFacts(
        index=index,
        action=str(spec.get("action", "")),
        tool=spec.get("tool", "noop"),
        ok=bool(spec.get("ok", True)),
        observation=str(spec.get("observation", "")),
        facts=facts,
    )


def episode(
    env: str = "calc",
    steps: Sequence[Mapping[str, Any] | StepFacts] = (),
    *,
    task_id: str = "t0",
    prompt: str = "",
    **facts: Any,
) -> Episode:
    """An episode of ``env`` with the given steps and episode-level ``facts``.

    >>> ep = episode("calc", [{"tool": "answer"}], success=True)
    >>> ep.num_steps, ep.facts["success"]
    (1, True)
    """
    return Episode(
        task_id=task_id,
        env=env,
        prompt=prompt,
        steps=tuple(step(i, s) for i, s in enumerate(steps)),
        facts=dict(facts),
    )
