"""What the run form offers: environments, presets, reward components, detectors.

Read from the registries and schemas of ``trainer`` and ``rewards`` (environments and
components on every call, so plugins count), so the form, its validation and the
page's JSON data agree on every name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from dashboard.pages import schema as sc
from rewards.config import DETECTOR_NAMES
from trainer.algorithms.presets import PRESET_LABELS, PRESETS, describe_preset
from trainer.envs.base import ENVIRONMENTS

PRESET_ORDER: tuple[str, ...] = tuple(PRESETS)  # the registry's order, no hand list
PRESET_FIELDS: tuple[str, ...] = tuple(describe_preset("grpo"))
DETECTOR_CHOICES = tuple((n, n.replace("_", " ")) for n in DETECTOR_NAMES)


# Environments and reward components are read from the registries on every call, so
# the ones a plugin registers after start-up (trainer.plugins) show up too.
def env_names() -> tuple[str, ...]:
    import trainer.config as tc  # its ENV_NAMES follow trainer.config.refresh_schema

    return tc.ENV_NAMES


def env_labels() -> dict[str, str]:
    """``name: label`` (the environment's ``label``, else its docstring's first
    line)."""
    out = {}
    for env in env_names():
        cls = ENVIRONMENTS.get(env)
        text = cls.label or (cls.__doc__ or "").strip().split("\n")[0]
        out[env] = f"{env}: {text}" if text else env
    return out


def env_params() -> dict[str, list[sc.FieldSpec]]:
    return {
        env: [
            _own(s, env).at(f"envp.{env}")
            for s in sc.model_specs(ENVIRONMENTS.get(env).Params, "")
        ]
        for env in env_names()
    }


# A parameter named as a setting of another section ("Path": the model's, "Max
# turns": the rollout's) is labelled as the environment's own.
_SHARED_NAMES = ("path", "max_turns")


def _own(spec: sc.FieldSpec, env: str) -> sc.FieldSpec:
    if spec.name not in _SHARED_NAMES:
        return spec
    return replace(
        spec, label=f"{env.capitalize()} {spec.label[:1].lower()}{spec.label[1:]}"
    )


def component_classes() -> dict[str, Any]:
    """Component name -> its config model (``rewards.config.component_models``)."""
    import rewards.config as rc

    return {n: rc.component_models()[n] for n in rc.COMPONENT_NAMES}


def component_envs() -> dict[str, list[str] | None]:
    """Component name -> the environments whose facts it reads (None: any), for the
    form's script to list the chosen environment's components first."""
    from rewards.components import COMPONENTS

    out: dict[str, list[str] | None] = {}
    for name in component_classes():
        envs = COMPONENTS.get(name).envs if name in COMPONENTS else None
        out[name] = sorted(envs) if envs is not None else None
    return out


def component_param_specs(name: str, prefix: str = "") -> list[sc.FieldSpec]:
    """The params inputs of component ``name`` under ``prefix`` (``...params``)."""
    cls = component_classes().get(name)
    if cls is None:
        return []
    specs = sc.model_specs(cls.model_fields["params"].annotation, "params")
    return [s.at(prefix) for s in specs] if prefix else list(specs)


_LIVE = {
    "ENV_NAMES": env_names,
    "ENV_LABELS": env_labels,
    "ENV_PARAMS": env_params,
    "COMPONENT_CLASSES": component_classes,
}


def __getattr__(name: str) -> Any:
    # The old constant names, read live (``catalog.ENV_NAMES``).
    if name in _LIVE:
        return _LIVE[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def learning_config(env: str) -> dict[str, Any] | None:
    """The config shown to learn on ``env`` (``bench/configs/<env>.yaml``, the one
    ``bench/learning.py`` trains), or None when there is none: the form starts there."""
    import yaml
    from django.conf import settings

    path = Path(settings.BASE_DIR) / "bench" / "configs" / f"{env}.yaml"
    if env not in env_names() or not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


DEMO_WARMSTART = 300  # the fewest of the learning demos (bench/configs: 300-500)


def demo_warmstart(env: str) -> int:
    """The warm-start steps a learning demo on ``env`` uses (``bench/configs``: its
    own config, else another demo of that environment, as ``dataset_arith.yaml`` is
    the ``dataset`` one's), else :data:`DEMO_WARMSTART`. A from-scratch model
    without one seldom earns a first reward (the form's warm-start hint)."""
    import yaml
    from django.conf import settings

    folder = Path(settings.BASE_DIR) / "bench" / "configs"
    own = folder / f"{env}.yaml"
    for path in [own, *sorted(p for p in folder.glob("*.yaml") if p != own)]:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict) or (data.get("env") or {}).get("name") != env:
            continue
        steps = (data.get("model") or {}).get("warmstart_steps")
        if isinstance(steps, int) and steps > 0:
            return steps
    return DEMO_WARMSTART


def default_reward(env: str) -> dict[str, Any]:
    from trainer.envs.base import default_reward_for

    return default_reward_for(env).model_dump(mode="json")


def presets_data() -> dict[str, Any]:
    """For the form's script: each preset's label and the fields it sets."""
    return {
        name: {"label": PRESET_LABELS.get(name, name), "fields": describe_preset(name)}
        for name in PRESET_ORDER
        if name in PRESETS
    }


def preset_choices() -> tuple[tuple[str, str], ...]:
    return tuple((n, PRESET_LABELS.get(n, n)) for n in PRESET_ORDER if n in PRESETS)


def _resolved(algorithm: dict[str, Any]) -> Any:
    from trainer.algorithms import resolve_algorithm
    from trainer.config import AlgorithmConfig

    try:
        return resolve_algorithm(AlgorithmConfig.model_validate(algorithm))
    except (ValueError, KeyError):
        return None


def corrections_summary(algorithm: dict[str, Any]) -> str:
    """The run's off-policy corrections and token selection, in words, for the run
    page's header: ``IS token mask [0.5, 3] · two-sided clip δ 4 · top 20% entropy
    tokens``; "" when none is on."""
    algo = _resolved(algorithm)
    if algo is None:
        return ""
    parts = []
    if algo.rollout_correction != "off":
        lower = (
            f"{algo.rollout_correction_lower:g}"
            if algo.rollout_correction_lower
            else "0"
        )
        parts.append(
            f"IS {algo.rollout_correction} {algo.rollout_correction_mode} "
            f"[{lower}, {algo.rollout_correction_cap:g}]"
        )
    if algo.delta:
        parts.append(f"two-sided clip δ {algo.delta:g}")
    if algo.dual_clip:
        parts.append(f"dual clip {algo.dual_clip:g}")
    if algo.top_entropy_quantile < 1:
        parts.append(f"top {algo.top_entropy_quantile * 100:g}% entropy tokens")
    return " · ".join(parts)


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
