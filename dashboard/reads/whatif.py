"""What-if reweighting of a stored run: checks the request, loads the rollouts, links.

The math is :func:`trainer.whatif_report.compare`; this module only adapts the
database to it. Rows are read with ``values_list`` of the columns it needs (never
``arrays``, ``segments`` or ``agent_steps``): trained tokens per agent step come from
``facts["action_tokens"]`` (the trainer's count of each step's action tokens, which are
the trained ones), falling back to ``length`` on the last step when a run did not
record it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from django.db import connection
from django.urls import reverse

from dashboard.errors import InvalidConfig, ServiceError
from dashboard.library import roots
from dashboard.models import Run, Trajectory
from dashboard.reads.whatif_added import raw_values
from rewards import repair
from rewards.repair_additions import sized_params
from trainer.httpsink import FRAMEWORK as OUR_FRAMEWORK

MAX_STEPS = 100_000
EXAMPLES = 5  # examples of each kind of change a report lists unless asked for more
MAX_EXAMPLES = 100


def run_setup(run: Run) -> tuple[Any, Any, Any, int]:
    """(TrainConfig, resolved algorithm, reward config, group size) of ``run``; an
    external run of another trainer has none (its ``{}`` validates as our defaults:
    components it never had)."""
    from pydantic import ValidationError

    from trainer.algorithms import resolve_algorithm
    from trainer.config import TrainConfig
    from trainer.runner import reward_config_for

    if run.external and run.framework != OUR_FRAMEWORK:
        raise ServiceError(
            f"run: trained by {run.framework or 'another trainer'}: what-if "
            "recomputes advantages as our trainer's algorithm does (its group "
            "normalisation, credit and reward components as configured), which "
            "another trainer's run does not carry; its rollouts' scores and weights "
            "are on its trajectory pages"
        )
    try:
        cfg = TrainConfig.model_validate(run.config)
        rcfg = reward_config_for(cfg)
        algo = resolve_algorithm(cfg.algorithm)
    except (ValidationError, ValueError, TypeError) as exc:
        raise ServiceError(
            "run: its config is not a trainer config, so its reward weights and "
            f"algorithm are unknown ({str(exc).splitlines()[0]})"
        ) from None
    return cfg, algo, rcfg, cfg.rollout.group_size


def check_weights(
    weights: Any, known: Sequence[str], can_add: Sequence[str] = ()
) -> dict[str, float]:
    """``{component: weight}`` (see :func:`rewards.repair.check_weights`), or
    InvalidConfig naming each bad ``weights.<key>``."""
    out, errors = repair.check_weights(weights, known, can_add)
    if errors:
        raise InvalidConfig(errors)
    return out


def check_steps(steps: Any) -> list[int] | None:
    if steps is None:
        return None
    if not isinstance(steps, list) or len(steps) > MAX_STEPS:
        raise InvalidConfig(f"steps: must be a list of at most {MAX_STEPS} steps")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
        raise InvalidConfig("steps: every step must be an integer")
    return steps


def check_examples(examples: Any) -> int:
    """How many examples of each kind to list (the largest changes first)."""
    if examples is None:
        return EXAMPLES
    if (
        isinstance(examples, bool)
        or not isinstance(examples, int)
        or not 1 <= examples <= MAX_EXAMPLES
    ):
        raise InvalidConfig(f"examples: must be an integer from 1 to {MAX_EXAMPLES}")
    return examples


def load_rollouts(run: Run, steps: list[int] | None) -> list[Any]:
    """The run's stored rollouts as :class:`trainer.whatif.StoredRollout`.

    The rows' own conversion is most of a what-if's time (10,000 rollouts: more
    than the SQL and the JSON decoding together), so the loop stays flat: one type
    test per value, no helper call per value."""
    from trainer.whatif import StoredRollout

    isfinite, fsum = math.isfinite, math.fsum
    out = []
    for (
        step,
        group,
        index,
        task,
        dropped,
        truncated,
        length,
        total,
        comps,
        per_step,
        tokens,
    ) in _rows(run, steps):
        comps = (
            {
                k: float(v)
                for k, v in comps.items()
                if type(v) in _NUMBER and isfinite(v)
            }
            if type(comps) is dict
            else {}
        )
        if type(total) not in _NUMBER or not isfinite(total):
            total = fsum(comps.values())
        out.append(
            StoredRollout(
                step,
                group,
                index,
                total,
                comps,
                _per_step(per_step),
                _tokens(tokens, length),
                dropped,
                truncated,
                task,
            )
        )
    return out


_COLUMNS = ("step", "group", "index", "task_id", "dropped", "truncated", "length")


def _rows(run: Run, steps: list[int] | None) -> Iterator[tuple]:
    """(step, group, index, task id, dropped, truncated, length, total, components,
    per-step values, action tokens) of each stored rollout. PostgreSQL builds them as
    one JSON array, decoded in one call (a decode per row and column through the
    ORM took longer than everything else the read does)."""
    if connection.vendor == "postgresql":
        where = "run_id = %s" + (" AND step = ANY(%s)" if steps is not None else "")
        params: list[Any] = [run.pk] + ([steps] if steps is not None else [])
        cols = ", ".join(f'"{c}"' for c in _COLUMNS)
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT coalesce(json_agg(json_build_array({cols}, "
                "rewards->'total', rewards->'components', rewards->'per_step', "
                "facts->'action_tokens')), '[]')::text "
                f"FROM {Trajectory._meta.db_table} WHERE {where}",
                params,
            )
            yield from json.loads(cur.fetchone()[0])
        return
    qs = Trajectory.objects.filter(run=run)
    if steps is not None:
        qs = qs.filter(step__in=steps)
    for *head, rewards, tokens in qs.values_list(
        *_COLUMNS, "rewards", "facts__action_tokens"
    ):
        if type(rewards) is not dict:
            rewards = {}
        yield (
            *head,
            rewards.get("total"),
            rewards.get("components"),
            rewards.get("per_step"),
            tokens,
        )


_NUMBER = (float, int)


def _per_step(d: Any) -> dict[str, list[float]]:
    """Per-step values; JSON holds no NaN (stored as strings), so anything that is not
    a plain number reads as 0 (a type test per value: this loop runs 100k times)."""
    if type(d) is not dict:
        return {}
    return {
        k: [x if type(x) in _NUMBER else 0.0 for x in v]
        for k, v in d.items()
        if type(v) is list
    }


def _tokens(action_tokens: Any, length: int) -> list[int]:
    if isinstance(action_tokens, list) and all(
        isinstance(n, int) for n in action_tokens
    ):
        return action_tokens
    return [int(length or 0)]


def whatif(
    run: Run, weights: Any, steps: Any = None, *, examples: Any = None
) -> dict[str, Any]:
    """The what-if report of ``run`` under ``weights`` (see :mod:`trainer.whatif`),
    listing ``examples`` of each kind of change (default :data:`EXAMPLES`)."""
    from trainer.runner import generation_budget
    from trainer.whatif import weighting_from_components
    from trainer.whatif_report import compare, weights_report

    cfg, algo, rcfg, group_size = run_setup(run)
    old = weighting_from_components(rcfg.components)
    budget = generation_budget(cfg)
    can_add = repair.addable(cfg.env.name, [c.name for c in rcfg.components], budget)
    new_weights = check_weights(weights, list(old.weights), can_add)
    added = [k for k in new_weights if k not in old.weights]
    examples = check_examples(examples)
    with _collector_paused():
        chosen = check_steps(steps)
        rows = load_rollouts(run, chosen)
        scored: dict[str, int] = {}
        if added:
            raw = raw_values(run, cfg.env.name, added, chosen, budget)
            rows = [
                replace(r, added=raw.get((r.step, r.group, r.index), {})) for r in rows
            ]
            # how many rollouts each added component scores at all (an overlong
            # penalty none of them ran into changes nothing, and the page says why)
            scored = {n: sum(any(v.get(n, ())) for v in raw.values()) for n in added}
        report = compare(
            rows,
            old,
            old.with_weights(new_weights),
            algo,
            group_size,
            examples=examples,
        )
    for kind in report["examples"].values():
        for ex in kind:
            ex["url"] = reverse(
                "pages:trajectory", args=[run.pk, ex["step"], ex["group"], ex["index"]]
            )
    report["run"] = str(run.pk)
    report["weights"] = weights_report(old, new_weights)
    report["added_scored"] = scored  # component -> rollouts it scores other than 0
    # A judge's model_path as the form names it; a clone resolves it again.
    report["clone_overrides"] = roots.shown_paths(
        clone_overrides(rcfg, new_weights, budget)
    )
    report["rollouts"] = len(rows)
    report["examples_limit"] = examples  # of each kind; example_counts: how many
    return report


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the rows are read and compared: tens of
    thousands of new, long-lived containers made it run over and over, for nothing
    (10,000 rollouts: 1.0-1.6 s with it, 0.45-0.7 s without; reference counting
    still frees everything). Restored even on error; a request that finds it
    already off leaves it to the one that turned it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def clone_overrides(
    rcfg: Any, weights: dict[str, float], budget: int | None = None
) -> dict[str, Any]:
    """Overrides for ``POST /api/runs/{id}/clone``: the run's full reward config (the
    environment's default made explicit) with the new base weights
    (:func:`rewards.repair.reweighted`: a new component is added, sized to the run's
    generation ``budget`` where it must be)."""
    return {"reward": repair.reweighted(rcfg.model_dump(mode="json"), weights, budget)}


def component_weights(run: Run) -> list[dict[str, Any]]:
    """The run's components with base weight and schedule kind, then those it could
    add (``added``: weight 0, not in the run), for the panel; empty when the run's
    config is not a trainer config (:func:`run_setup`)."""
    try:
        cfg, _, rcfg, _ = run_setup(run)
    except ServiceError:
        return []
    own = [
        {"key": c.key, "name": c.name, "weight": c.weight,
         "schedule": c.schedule.kind, "added": False}
        for c in rcfg.components
    ]  # fmt: skip
    from trainer.runner import generation_budget

    budget = generation_budget(cfg)
    more = repair.addable(cfg.env.name, [c.name for c in rcfg.components], budget)
    return own + [
        {"key": n, "name": n, "weight": 0.0, "schedule": "constant", "added": True,
         "sized": sized_text(sized_params(n, budget), cfg.rollout)}
        for n in more
    ]  # fmt: skip


def sized_text(params: dict[str, Any] | None, rollout: Any) -> str:
    """What an added component's sized parameters say, in the panel's words, and
    when the whole budget bounds them (it counts the prompt and tool answers too, so
    a long prompt leaves an episode fewer tokens to write than that)."""
    if not params:
        return ""
    text = ", ".join(f"{k} {v}" for k, v in params.items())
    if params.get("max_len") == rollout.max_total_tokens:
        text += "; max_total_tokens bounds it, prompt and tool answers included"
    return text
