"""The repair loop's knowledge of patterns no reward weight removes but an added
component does (see :mod:`rewards.repair` for those a weight removes): length drift,
against which DAPO adds its soft overlong punishment, sized to the run's generation
budget as the ``dapo`` preset sizes it (:func:`rewards.presets.with_overlong_penalty`).
The run page offers it on the alert; the clone form opens with it added.

Pure: no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rewards.config import RewardConfig


@dataclass(frozen=True)
class Addition:
    """A component whose addition to the reward removes a pattern no weight of the
    run's own does, and why."""

    component: str
    why: str


ADDITIONS: dict[str, Addition] = {
    "length_drift": Addition(
        "overlong_penalty",
        "it charges an episode for running into the generation budget: nothing up "
        "to its last fifth, then down to -1 at the budget (DAPO's soft overlong "
        "punishment), so growing longer stops paying",
    ),
}


def generation_budget(max_turns: int, max_action_tokens: int, total: int) -> int:
    """Tokens a rollout may generate: turns x tokens per action, at most the whole
    budget (``trainer.runner.generation_budget`` of a config)."""
    return max(1, min(max_turns * max_action_tokens, total))


def sized_params(name: str, budget: int | None) -> dict[str, Any] | None:
    """Parameters of component ``name`` added to a run whose rollouts generate at
    most ``budget`` tokens (``trainer.runner.generation_budget``), for a component
    whose defaults know nothing of the run: the overlong penalty's
    (:func:`rewards.presets.overlong_params`); None for the others (their defaults).

    >>> sized_params("overlong_penalty", 30), sized_params("format", 30)
    ({'max_len': 30, 'cache': 6}, None)
    """
    from rewards.presets import overlong_params

    if name == "overlong_penalty" and budget is not None:
        return overlong_params(max(1, budget))
    return None


def addition(detector: str, reward: RewardConfig, budget: int) -> dict | None:
    """The component to add against ``detector``'s pattern, as a reward component's
    config (``{"name", "weight", "params"}``), sized as the ``dapo`` preset sizes
    it (:func:`rewards.presets.with_overlong_penalty`: weight 1, ``max_len`` the
    generation ``budget``, ``cache`` a fifth of it); None when no component does, or
    the reward has that component already.

    >>> from rewards.presets import default_reward_config as default_reward
    >>> addition("length_drift", default_reward("calc"), 30)
    {'name': 'overlong_penalty', 'weight': 1.0, 'params': {'max_len': 30, 'cache': 6}}
    >>> addition("entropy_collapse", default_reward("calc"), 30) is None
    True
    """
    from rewards.presets import with_overlong_penalty

    add = ADDITIONS.get(detector)
    if add is None or any(c.name == add.component for c in reward.components):
        return None
    grown = with_overlong_penalty(reward, max(1, budget)).model_dump(mode="json")
    added = grown["components"][-1]
    return {k: added[k] for k in ("name", "weight", "params")}
