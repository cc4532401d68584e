"""What-if with a component the run did not have: which ones can be added, and their
raw values on the stored rollouts.

Which components may be added is :func:`rewards.repair.addable`. A stored trajectory
keeps its episode's facts and its agent steps' facts
(``Trajectory.facts``, ``agent_steps``), which is all a fact-based reward component
reads: the episode is rebuilt from them and the component's own function
(:data:`rewards.components.COMPONENTS`) scores it with default parameters, exactly as
the trainer would have (``rewards.combine``), unweighted. Components that need more
than facts cannot be added.
"""

from __future__ import annotations

import math
from typing import Any

from dashboard.models import Run, Trajectory


def raw_values(
    run: Run,
    env: str,
    names: list[str],
    steps: list[int] | None,
    budget: int | None = None,
) -> dict[tuple[int, int, int], dict[str, list[float]]]:
    """(step, group, index) -> {component: raw per-step values} of ``names`` on the
    run's stored rollouts (of ``steps``), each with the parameters a clone would
    give it (sized to the run's generation ``budget`` where it must be). A rollout
    whose episode a component cannot score (facts of another shape) gets none for
    it: it adds 0 there."""
    from rewards.components import COMPONENTS, Context
    from rewards.repair_additions import sized_params

    if not names:
        return {}
    specs = [(n, COMPONENTS.get(n)) for n in names]
    # addable: defaults exist, or sizes
    params = {n: spec.params(**(sized_params(n, budget) or {})) for n, spec in specs}
    qs = Trajectory.objects.filter(run=run)
    if steps is not None:
        qs = qs.filter(step__in=steps)
    out: dict[tuple[int, int, int], dict[str, list[float]]] = {}
    for step, group, index, task, facts, agent_steps in qs.values_list(
        "step", "group", "index", "task_id", "facts", "agent_steps"
    ).iterator(chunk_size=500):
        ep = episode(env, task, facts, agent_steps)
        values: dict[str, list[float]] = {}
        for name, spec in specs:
            try:
                raw = spec.fn(ep, params[name], Context(step=step))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if all(isinstance(v, float | int) and math.isfinite(v) for v in raw):
                values[name] = [float(v) for v in raw]
        out[(step, group, index)] = values
    return out


def episode(env: str, task_id: str, facts: Any, agent_steps: Any) -> Any:
    """The :class:`rewards.types.Episode` a stored trajectory was scored on."""
    from rewards.types import Episode, StepFacts

    steps = []
    for i, s in enumerate(agent_steps if isinstance(agent_steps, list) else []):
        s = s if isinstance(s, dict) else {}
        step_facts = s.get("facts")
        steps.append(
            StepFacts(
                int(s["index"]) if isinstance(s.get("index"), int) else i,
                str(s.get("action") or ""),
                s.get("tool") if isinstance(s.get("tool"), str) else None,
                bool(s.get("ok", True)),
                str(s.get("observation") or ""),
                step_facts if isinstance(step_facts, dict) else {},
            )
        )
    return Episode(
        task_id, env, "", tuple(steps), facts if isinstance(facts, dict) else {}
    )
