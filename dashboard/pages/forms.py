"""The new-run form: POST data <-> a ``TrainConfig`` dict, with errors filed per field.

Validation is the schema's own (``TrainConfig.model_validate``) plus the checks the
trainer would otherwise only hit at start-up (algorithm conflicts, components the
environment cannot feed). Pydantic error locations are mapped back onto the input
that caused them, or the nearest fieldset that holds it (:mod:`.formerrors`). The
inputs themselves are described in :mod:`.formfields`.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from dashboard.pages import schema as sc
from dashboard.pages.catalog import (
    component_param_specs,
    default_reward,
    demo_warmstart,
    env_names,
    env_params,
    learning_config,
)
from dashboard.pages.formerrors import ErrorMap
from dashboard.pages.formfields import (
    _DIM,
    _ROW,
    _TRUE,
    DIMENSION_ROW,
    LORA,
    REWARD_TOP,
    SCHEDULE_ROW,
    STATIC_SPECS,
    ComponentRow,
    JudgeRow,
    Row,
    _indices,
    component_row,
    judge_row,
    parse,
    row_specs,
    values_from_config,
)
from trainer.algorithms.presets import PRESETS
from trainer.config import TrainConfig

__all__ = ["RunForm", "default_config", "normalise", "values_from_config"]


def default_config(
    env: str = "calc", preset: str = "grpo", params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The form's starting point: the config shown to learn on ``env``
    (``bench/configs``: environment params, warm start, batch, learning rate, steps)
    with ``preset``, else the schema's defaults; ``params`` pre-fill the environment's
    parameters. The reward stays the environment's default (the demos trim it to show
    one component being learned). An environment with a required parameter left empty
    (``dataset``'s ``path``) starts with its other defaults and the blank to fill."""
    env = env if env in env_names() else "calc"
    preset = preset if preset in PRESETS else "grpo"  # a query string's, unchecked
    base = learning_config(env) or {"env": {"name": env}}
    base = {k: v for k, v in base.items() if k not in ("reward", "name")}
    algorithm = {**(base.get("algorithm") or {}), "preset": preset}
    env_cfg = dict(base.get("env") or {"name": env})
    env_cfg["params"] = {**(env_cfg.get("params") or {}), **(params or {})}
    try:
        cfg = TrainConfig.model_validate(
            {**base, "env": env_cfg, "algorithm": algorithm}
        )
        out = normalise(cfg.model_dump(mode="json", exclude={"name"}))
    except ValueError:  # a required parameter is blank, or a demo file went stale
        out = TrainConfig.model_validate({"algorithm": {"preset": preset}}).model_dump(
            mode="json", exclude={"name"}
        )
        out["env"] = {"name": env, "params": {**_param_defaults(env), **(params or {})}}
        out["reward"] = None
        out = normalise(out)
    return _consistent(out, base, env)  # no name: a blank one is the run's own


def _consistent(out: dict[str, Any], base: dict[str, Any], env: str) -> dict[str, Any]:
    """A starting point that does not trip the form's own advice: a from-scratch
    model warm-starts as the learning demos do (:func:`demo_warmstart`), and an
    environment's own turn limit (``dataset``'s max turns) is Rollout's max turns
    too, unless the learning config sets that (the smaller ends an episode)."""
    model = out.get("model") or {}
    if not model.get("path") and not model.get("warmstart_steps"):
        out["model"] = {**model, "warmstart_steps": demo_warmstart(env)}
    turns = ((out.get("env") or {}).get("params") or {}).get("max_turns")
    if isinstance(turns, int) and "max_turns" not in (base.get("rollout") or {}):
        out["rollout"] = {**(out.get("rollout") or {}), "max_turns": turns}
    return out


def _param_defaults(env: str) -> dict[str, Any]:
    from trainer.envs.base import ENVIRONMENTS

    fields = ENVIRONMENTS.get(env).Params.model_fields
    return {
        k: f.get_default(call_default_factory=True)
        for k, f in fields.items()
        if not f.is_required()
    }


class RunForm:
    """A new-run (or clone) form, bound to POST data or filled from a config."""

    def __init__(
        self, data: Any = None, *, initial: dict[str, Any] | None = None
    ) -> None:
        self.bound = data is not None
        self.errors: dict[str, list[str]] = {}
        self.cleaned: dict[str, Any] | None = None
        if self.bound:
            self.values: dict[str, Any] = {k: data.getlist(k) for k in data}
            self.raw, self.renames, self.problems = parse(data)
        else:
            self.values = values_from_config(initial or default_config())
            self.raw, self.renames, self.problems = {}, {}, {}

    # values -------------------------------------------------------------------------
    def value(self, spec: sc.FieldSpec) -> Any:
        """What the input shows: a string, a bool (checkbox) or a list (multi)."""
        present = spec.path in self.values
        val = self.values.get(spec.path)
        if spec.kind == "bool":
            if self.bound:
                return present and str(_first(val)).lower() in _TRUE
            return bool(val) if present else bool(spec.default)
        if spec.kind == "multi":
            if not present:
                if self.bound and self._row_present(spec.path):
                    return []
                return [str(v) for v in (spec.default or [])]
            items = val if isinstance(val, list) else [val]
            return [str(v) for v in (items if items != [None] else spec.default or [])]
        if not present or val is None:
            return "" if spec.optional or spec.kind == "kv" else spec.default_text
        return (
            sc._text(_first(val))
            if isinstance(val, list) and spec.kind != "csv"
            else sc._text(val)
        )

    def _row_present(self, path: str) -> bool:
        # A bound form that rendered this multi-field but had every box unchecked.
        return path.startswith(("envp.", "reward.detectors"))

    @property
    def env(self) -> str:
        env = sc._text(_first(self.values.get("env.name", "calc")))
        return env if env in env_names() else "calc"

    WARMSTART_HINT = (
        "A model built from scratch knows no action grammar: without warm-start "
        "steps it seldom earns a first reward. The learning demos use 300-500."
    )

    @property
    def warmstart_hint(self) -> str:
        """A from-scratch model with no warm start rarely finds its first reward
        (run_form.js shows and hides the same text by the same rule as you type)."""
        path = sc._text(_first(self.values.get("model.path", ""))).strip()
        steps = sc._text(_first(self.values.get("model.warmstart_steps", "0"))).strip()
        if path or steps not in ("", "0"):
            return ""
        return self.WARMSTART_HINT

    @property
    def lora_shown(self) -> bool:
        """The LoRA inputs are for a pretrained model (a path); shown also when any
        is filled in, so that nothing typed is out of sight (run_form.js: the same)."""
        if sc._text(_first(self.values.get("model.path", ""))).strip():
            return True
        return any(self.value(s) not in ("", None) for s in LORA)

    @property
    def preset(self) -> str:
        return sc._text(_first(self.values.get("algorithm.preset", "grpo"))) or "grpo"

    # rows -----------------------------------------------------------------------------
    def _row_indices(self, kind: str) -> list[int]:
        return _indices(self.values, _ROW, kind)

    def components(self) -> list[ComponentRow]:
        rows = []
        for i in self._row_indices("components"):
            prefix = f"reward.components.{i}"
            kind = sc._text(_first(self.values.get(f"{prefix}.name")))
            rows.append(
                ComponentRow(
                    index=i,
                    prefix=prefix,
                    kind=kind,
                    specs=row_specs(component_row(), prefix),
                    schedule=row_specs(SCHEDULE_ROW, f"{prefix}.schedule"),
                    params=component_param_specs(kind, f"{prefix}.params"),
                )
            )
        return rows

    def judges(self) -> list[JudgeRow]:
        rows = []
        for i in self._row_indices("judges"):
            prefix = f"reward.judges.{i}"
            dims = sorted(
                int(m.group(2))
                for k in self.values
                if (m := _DIM.match(k)) and int(m.group(1)) == i
            )
            rows.append(
                JudgeRow(
                    index=i,
                    prefix=prefix,
                    specs=row_specs(judge_row(), prefix),
                    dimensions=[
                        Row(
                            k,
                            f"{prefix}.rubric.{k}",
                            row_specs(DIMENSION_ROW, f"{prefix}.rubric.{k}"),
                        )
                        for k in dims
                    ],
                )
            )
        return rows

    def known_paths(self) -> set[str]:
        """Every input and fieldset an error can be filed under."""
        known = {
            "",
            "name",
            "env",
            "env.name",
            f"envp.{self.env}",
            "model",
            "model.lora",
            "resources",
            "rollout",
            "algorithm",
            "optim",
            "checkpoint",
            "eval",
            "record",
            "reward",
            "reward.components",
            "reward.judges",
            "reward.detectors",
        }
        known.update(s.path for s in STATIC_SPECS)
        known.update(s.path for s in env_params().get(self.env, []))
        known.update(s.path for s in REWARD_TOP)
        for row in self.components():
            known.update({row.prefix, f"{row.prefix}.schedule", f"{row.prefix}.params"})
            known.update(s.path for s in [*row.specs, *row.schedule, *row.params])
        for judge in self.judges():
            known.update({judge.prefix, f"{judge.prefix}.rubric"})
            known.update(s.path for s in judge.specs)
            for dim in judge.dimensions:
                known.add(dim.prefix)
                known.update(s.path for s in dim.specs)
        return known

    # validation -------------------------------------------------------------------------
    def is_valid(self) -> bool:
        from rewards import check_reward_config
        from trainer.algorithms.presets import resolve_algorithm

        if not self.bound:
            return False
        errors = ErrorMap(self.known_paths(), self.renames, self.env)
        try:
            cfg = TrainConfig.model_validate(self.raw)
        except ValidationError as exc:
            errors.add_validation_error(exc)
        else:
            try:
                resolve_algorithm(cfg.algorithm)
            except ValueError as exc:
                errors.add_algorithm_conflict(str(exc))
            if cfg.reward is not None:
                for line in check_reward_config(cfg.reward, cfg.env.name):
                    errors.add_line(line, prefix="reward.")
            if not errors.errors and not self.problems:
                self.cleaned = normalise(cfg.model_dump(mode="json"))
        for path, problem in self.problems.items():
            errors.errors[path] = [problem]  # in place of the schema's own wording
        self.errors = errors.errors
        return not self.errors

    def add_service_errors(self, lines: list[str]) -> None:
        """File a service's ``field: message`` refusals (``InvalidConfig``, ``Conflict``)."""
        errors = ErrorMap(self.known_paths(), self.renames, self.env)
        errors.errors = self.errors
        for line in lines:
            errors.add_line(line)
        self.errors = errors.errors

    @property
    def non_field_errors(self) -> list[str]:
        return self.errors.get("", [])

    def errors_for(self, path: str) -> list[str]:
        return self.errors.get(path, [])


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else ""
    return value


def normalise(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict with every default spelled out: environment params filled in and
    ``reward: None`` replaced by the environment's default (what the run will use)."""
    from trainer.envs.base import ENVIRONMENTS

    out = dict(config)
    if not isinstance(out.get("env") or {}, dict):
        return out  # an external run's own spelling ("env": "gsm8k"): as it is
    env = dict(out.get("env") or {"name": "calc"})
    name = env.get("name", "calc")
    if not isinstance(name, str) or name not in env_names():
        return out  # no environment of this server's: nothing to fill in
    try:
        params_model = ENVIRONMENTS.get(name).Params
        env["params"] = params_model.model_validate(env.get("params") or {}).model_dump(
            mode="json"
        )
    except (KeyError, ValueError):
        pass
    out["env"] = env
    if out.get("reward") is None:
        out["reward"] = default_reward(name)
    return out
