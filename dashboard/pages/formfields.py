"""The run form's inputs: which exist, and how POST data becomes a config dict.

Input names are dotted config paths (``algorithm.clip_high``,
``reward.components.2.params.beta``); environment parameters are namespaced by
environment (``envp.search.top_k``) so switching environments keeps each one's
values. Blank inputs mean "the default" (for algorithm overrides: "the preset's
value"); rows deleted in the browser leave gaps in the indices, which :func:`parse`
compacts and reports as ``renames`` so errors find their way back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from dashboard.pages import schema as sc
from dashboard.pages.catalog import (
    PRESET_FIELDS,
    component_param_specs,
    default_reward,
    env_params,
    preset_choices,
)
from dashboard.pages.formrows import (  # noqa: F401  (re-exported)
    COMPONENT_ROW,
    DIMENSION_ROW,
    JUDGE_ROW,
    REWARD_TOP,
    SCHEDULE_ROW,
    Row,
    component_row,
    judge_row,
    row_specs,
)
from dashboard.pages.typednumbers import number_problem
from trainer.config import (
    AlgorithmConfig,
    CheckpointConfig,
    EvalConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    ResourcesConfig,
    RolloutConfig,
    RolloutCorrectionConfig,
    TrainConfig,
)
from trainer.recording_policy import AUTO_MAX_ROLLOUTS, MAX_GROUPS, RecordConfig

# A row's index as the browser numbers it (a longer one is no row of the form's).
_ROW = re.compile(r"^reward\.(components|judges)\.(\d{1,6})\.name$")
_DIM = re.compile(r"^reward\.judges\.(\d{1,6})\.rubric\.(\d{1,6})\.name$")
_TRUE = {"on", "true", "1", "yes"}
BASIC = [
    replace(
        sc.field_spec(TrainConfig, "name", ""),
        optional=True,  # blank: named from the environment and algorithm
        placeholder="blank: calc-grpo-N",  # static/js/run_form.js follows the form
    ),
    sc.field_spec(TrainConfig, "steps", ""),
    sc.field_spec(TrainConfig, "seed", ""),
]
# Labels another section has too ("Every", "Path") say which: an error summary that
# says "Every" twice says nothing.
MODEL = [
    replace(s, label="Model path") if s.name == "path" else s
    for s in sc.model_specs(ModelConfig, "model")
]
# The built-in rollout engines in a few words; a plugin's shows its name.
_ENGINE_WORDS = {
    "eager": "eager (default)",
    "compiled": "compiled (CUDA: static cache, torch.compile)",
    "continuous": "continuous (episodes rejoin across turns)",
    "reference": "reference (the plain loop, for comparison)",
}


def _engine_choices() -> tuple[tuple[str, str], ...]:
    from trainer.engines import ENGINES

    order = list(_ENGINE_WORDS)
    names = sorted(
        ENGINES.names(), key=lambda n: (order.index(n) if n in order else len(order), n)
    )
    return tuple((n, _ENGINE_WORDS.get(n, n)) for n in names)


ROLLOUT = [
    replace(s, kind="choice", choices=_engine_choices()) if s.name == "engine" else s
    for s in sc.model_specs(RolloutConfig, "rollout")
]
PRESET = replace(
    sc.field_spec(AlgorithmConfig, "preset", "algorithm"),
    label="Algorithm preset",
    choices=preset_choices(),
    help="Sets the fields below; any of them can be overridden.",
)
_CREDIT_HELP = (
    "outcome: one advantage per trajectory; process: step rewards normalised in the "
    "group, summed from each step on; gae: a critic."
)
_ON_OFF = (("true", "on"), ("false", "off"))
OVERRIDES = [
    replace(s, label="Credit assignment", help=_CREDIT_HELP)
    if s.name == "credit"
    # A checkbox cannot say "the preset's value": an on/off choice with a blank can.
    else replace(s, kind="choice", choices=_ON_OFF)
    if s.kind == "bool"
    else s
    for s in (sc.field_spec(AlgorithmConfig, n, "algorithm") for n in PRESET_FIELDS)
]
ALGORITHM = [
    s
    for s in sc.model_specs(AlgorithmConfig, "algorithm")
    if s.name not in PRESET_FIELDS and s.name != "preset"
] + [
    # A nested option: every input blank means off (None); any set turns it on (kind
    # then required), the blank ones at the schema's defaults.
    replace(
        s,
        optional=True,
        default=None,
        label=f"Rollout correction {s.name}",
        placeholder=""
        if s.name == "kind"
        else (f"default: {s.default_text}" if s.default_text else "none"),
    )
    for s in sc.model_specs(RolloutCorrectionConfig, "algorithm.rollout_correction")
]
# LoRA (a nested option, like rollout correction): every input blank means no LoRA
# (None); any set turns it on, the blank ones at the schema's defaults.
LORA = [
    replace(
        s,
        optional=True,
        default=None,
        label=f"LoRA {s.name.replace('_', ' ')}",
        placeholder=f"default: {s.default_text}" if s.default_text else "none",
    )
    for s in sc.model_specs(LoraConfig, "model.lora")
]
RECORD = [
    replace(s, label="Record every (steps)")
    if s.name == "every"
    else replace(
        s,
        kind="int",
        label="Groups per recorded step",
        words=("auto",),
        blank_none=True,
        placeholder="all",
        min=1,
        max=MAX_GROUPS,
        help="A whole number, auto (all up to "
        f"{AUTO_MAX_ROLLOUTS} rollouts a step, else that many rollouts' worth), or "
        "blank: all. The best, the worst and alerted groups are always kept.",
    )
    if s.name == "groups"
    else replace(s, label="Per-token arrays")
    for s in sc.model_specs(RecordConfig, "record")
]
OPTIM = sc.model_specs(OptimConfig, "optim")
CHECKPOINT = [
    replace(s, label="Checkpoint every (steps)") if s.name == "every" else s
    for s in sc.model_specs(CheckpointConfig, "checkpoint")
]
EVAL = [
    replace(s, label="Evaluate every (steps)") if s.name == "every" else s
    for s in sc.model_specs(EvalConfig, "eval")
]
RESOURCES = sc.model_specs(ResourcesConfig, "resources")
STATIC_SPECS = [
    *BASIC,
    *MODEL,
    *LORA,
    *RESOURCES,
    *ROLLOUT,
    PRESET,
    *OVERRIDES,
    *ALGORITHM,
    *OPTIM,
    *CHECKPOINT,
    *EVAL,
    *RECORD,
]


# --- values ------------------------------------------------------------------------------
def values_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """Form values (path -> value) for a config dict (a run's stored config)."""
    cfg = dict(config)
    env = (cfg.get("env") or {}).get("name") or "calc"
    params = (cfg.get("env") or {}).get("params") or {}
    reward = cfg.get("reward") or default_reward(env)
    detectors = dict(reward.get("detectors") or {})
    thresholds = detectors.pop("thresholds", None) or {}
    reward = {**reward, "detectors": detectors}
    cfg = {k: v for k, v in cfg.items() if k not in ("env", "reward")}
    values = sc.flatten(cfg)
    values["env.name"] = env
    for key, value in params.items():
        values[f"envp.{env}.{key}"] = value
    values.update(sc.flatten(reward, "reward"))
    values["reward.detectors.thresholds"] = "\n".join(
        f"{k} = {v}" for k, v in thresholds.items()
    )
    return values


def _read(
    data: Any,
    spec: sc.FieldSpec,
    path: str,
    out: dict[str, Any],
    problems: dict[str, str],
) -> None:
    """Put the submitted value of ``spec`` (input ``path``) into ``out`` by name; why
    a number's text is not one goes into ``problems`` under ``path``."""
    name = spec.name
    if spec.kind == "bool":
        out[name] = str(data.get(path, "")).lower() in _TRUE
        return
    if spec.kind == "multi":
        chosen = [v for v in data.getlist(path) if v]
        if path == "reward.detectors.enabled" and set(chosen) == {
            c for c, _ in spec.choices
        }:
            return  # every detector: None (also picks up detectors added later)
        out[name] = chosen
        return
    raw = str(data.get(path, "")).strip()
    if raw == "" and spec.blank_none:
        out[name] = None
        return
    if raw == "":
        if spec.kind in ("int", "float") and not spec.optional and path in data:
            # a cleared input would otherwise launch with the default, unseen
            problems[path] = f"Enter a number (the default is {spec.default_text})"
        return
    if spec.kind in ("int", "float"):
        problem = number_problem(raw, spec.kind, spec.words)
        if problem is not None:
            problems[path] = problem
        elif spec.kind == "int" and raw not in spec.words:
            out[name] = int(raw)  # exact; a union with words takes no numeric text
            return
        out[name] = raw  # kept: the schema refuses it too, and stops before validators
    elif spec.kind == "csv":
        out[name] = [p.strip() for p in raw.split(",") if p.strip()]
    elif spec.kind == "kv":
        pairs = {}
        for line in raw.splitlines():
            if line.strip():
                key, _, value = line.partition("=")
                pairs[key.strip()] = value.strip()
        out[name] = pairs
    else:
        out[name] = raw


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = tree
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def _indices(
    data: Any, pattern: re.Pattern[str], group: str | None = None
) -> list[int]:
    found = set()
    for key in data:
        m = pattern.match(key)
        if m and (group is None or m.group(1) == group):
            found.add(int(m.group(m.lastindex)))
    return sorted(found)


def parse(data: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(config dict, renames, problems): ``renames`` maps a compacted row path to the
    form's own (rows removed in the browser leave gaps in the indices); ``problems``
    maps an input (the form's own path) to why its text is not a number."""
    config: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for spec in STATIC_SPECS:
        holder: dict[str, Any] = {}
        _read(data, spec, spec.path, holder, problems)
        if spec.name in holder:
            _set(config, spec.path, holder[spec.name])
    env = str(data.get("env.name", "calc"))
    params: dict[str, Any] = {}
    for spec in env_params().get(env, []):
        _read(data, spec, f"envp.{env}.{spec.name}", params, problems)
    config["env"] = {"name": env, "params": params}

    renames: dict[str, str] = {}
    reward: dict[str, Any] = {"components": [], "judges": []}
    for spec in REWARD_TOP:
        holder = {}
        _read(data, spec, spec.path, holder, problems)
        if spec.name in holder:
            _set(reward, spec.path.removeprefix("reward."), holder[spec.name])
    for j, i in enumerate(_indices(data, _ROW, "components")):
        prefix = f"reward.components.{i}"
        renames[f"reward.components.{j}"] = prefix
        comp: dict[str, Any] = {}
        for spec in COMPONENT_ROW:  # the name choice is checked by the schema
            _read(data, spec, f"{prefix}.{spec.name}", comp, problems)
        schedule: dict[str, Any] = {}
        for spec in SCHEDULE_ROW:
            _read(data, spec, f"{prefix}.schedule.{spec.name}", schedule, problems)
        comp["schedule"] = schedule
        comp["params"] = {}
        for spec in component_param_specs(str(comp.get("name", ""))):
            _read(data, spec, f"{prefix}.params.{spec.name}", comp["params"], problems)
        reward["components"].append(comp)
    for j, i in enumerate(_indices(data, _ROW, "judges")):
        prefix = f"reward.judges.{i}"
        renames[f"reward.judges.{j}"] = prefix
        judge: dict[str, Any] = {"rubric": []}
        for spec in JUDGE_ROW:
            _read(data, spec, f"{prefix}.{spec.name}", judge, problems)
        dims = sorted(
            int(m.group(2))
            for k in data
            if (m := _DIM.match(k)) and int(m.group(1)) == i
        )
        for d, k in enumerate(dims):
            renames[f"reward.judges.{j}.rubric.{d}"] = f"{prefix}.rubric.{k}"
            dim: dict[str, Any] = {}
            for spec in DIMENSION_ROW:
                _read(data, spec, f"{prefix}.rubric.{k}.{spec.name}", dim, problems)
            judge["rubric"].append(dim)
        reward["judges"].append(judge)
    config["reward"] = reward
    return config, renames, problems


# --- rows, as the templates see them ---------------------------------------------------
@dataclass
class ComponentRow:
    index: int
    prefix: str
    kind: str
    specs: list[sc.FieldSpec]
    schedule: list[sc.FieldSpec]
    params: list[sc.FieldSpec]


@dataclass
class JudgeRow:
    index: int
    prefix: str
    specs: list[sc.FieldSpec]
    dimensions: list[Row]
