"""What the run form offers: environments, presets, reward components, detectors.

Read from the registries and schemas of ``trainer`` and ``rewards`` once at import, so
the form, its validation and the page's JSON data agree on every name.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

from dashboard.pages import schema as sc
from rewards.config import DETECTOR_NAMES, ComponentConfig
from trainer.algorithms.presets import PRESET_LABELS, PRESETS, describe_preset
from trainer.envs.base import ENVIRONMENTS

try:
    from trainer.config import ENV_NAMES as _ENV_NAMES
except ImportError:  # an older schema: EnvConfig.name is a Literal
    from trainer.config import EnvConfig

    _ENV_NAMES = typing.get_args(EnvConfig.model_fields["name"].annotation)
ENV_NAMES: tuple[str, ...] = tuple(_ENV_NAMES)
ENV_LABELS = {
    "calc": "calc: word problems with a calculator tool",
    "search": "search: multi-hop retrieval (F-beta recall)",
    "swarm": "swarm: orchestrator with parallel sub-agents (PARL)",
    "dataset": "dataset: your prompts and answers (upload on Datasets)",
}
PRESET_ORDER: tuple[str, ...] = tuple(PRESETS)  # the registry's order, no hand list
PRESET_FIELDS: tuple[str, ...] = tuple(describe_preset("grpo"))
DETECTOR_CHOICES = tuple((n, n.replace("_", " ")) for n in DETECTOR_NAMES)

_union = typing.get_args(ComponentConfig)[0]
COMPONENT_CLASSES: dict[str, Any] = {
    c.model_fields["name"].default: c for c in typing.get_args(_union)
}


def _env_params() -> dict[str, list[sc.FieldSpec]]:
    import trainer.envs  # noqa: F401  (registers the built-in environments)

    return {
        env: [
            s.at(f"envp.{env}")
            for s in sc.model_specs(ENVIRONMENTS.get(env).Params, "")
        ]
        for env in ENV_NAMES
    }


ENV_PARAMS = _env_params()


@cache
def _param_specs(name: str) -> tuple[sc.FieldSpec, ...]:
    cls = COMPONENT_CLASSES.get(name)
    if cls is None:
        return ()
    return tuple(sc.model_specs(cls.model_fields["params"].annotation, "params"))


def component_param_specs(name: str, prefix: str = "") -> list[sc.FieldSpec]:
    """The params inputs of component ``name`` under ``prefix`` (``...params``)."""
    specs = _param_specs(name)
    return [s.at(prefix) for s in specs] if prefix else list(specs)


def default_reward(env: str) -> dict[str, Any]:
    from rewards import default_reward_config

    return default_reward_config(env).model_dump(mode="json")


def presets_data() -> dict[str, Any]:
    """For the form's script: each preset's label and the fields it sets."""
    return {
        name: {"label": PRESET_LABELS.get(name, name), "fields": describe_preset(name)}
        for name in PRESET_ORDER
        if name in PRESETS
    }


def preset_choices() -> tuple[tuple[str, str], ...]:
    return tuple((n, PRESET_LABELS.get(n, n)) for n in PRESET_ORDER if n in PRESETS)


def kl_summary(algorithm: dict[str, Any]) -> str:
    """How a run's config uses the KL term, in words, for the run page."""
    from trainer.algorithms import resolve_algorithm
    from trainer.config import AlgorithmConfig

    try:
        algo = resolve_algorithm(AlgorithmConfig.model_validate(algorithm))
    except (ValueError, KeyError):
        return ""
    if algo.kl_beta <= 0:
        return "no KL term"
    clamp = f", clamped to ±{algo.kl_clamp:g}" if algo.kl_clamp else ", unclamped"
    where = "subtracted from the reward" if algo.kl_in_reward else "in the loss"
    coef = f"β {algo.kl_beta:g}"
    if algo.kl_target:
        coef += f" adapting towards KL {algo.kl_target:g}"
    return f"KL {algo.kl_kind}{clamp}, {where}, {coef}"
