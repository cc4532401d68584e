"""The run form's repeated rows of the reward section: a component, its schedule, a
judge, a rubric dimension, and the reward's own inputs (judge aggregate, detectors).
Choices that plugins extend (components, judge backends) are filled when asked.
Re-exported by :mod:`dashboard.pages.formfields`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dashboard.pages import schema as sc
from dashboard.pages.catalog import DETECTOR_CHOICES, component_classes

COMPONENT_ROW = [
    sc.FieldSpec("name", "Component", "choice"),  # choices: see component_row()
    sc.FieldSpec(
        "label",
        "Label",
        "text",
        optional=True,
        help="Name in metrics; defaults to the component name.",
    ),
    sc.FieldSpec("weight", "Weight", "float", default=1.0, min=-1000, max=1000),
]


def component_row() -> list[sc.FieldSpec]:
    """COMPONENT_ROW with the registered components (plugins' too) as choices."""
    names = tuple((n, n) for n in component_classes())
    return [replace(COMPONENT_ROW[0], choices=names), *COMPONENT_ROW[1:]]


SCHEDULE_ROW = [
    sc.FieldSpec(
        "kind",
        "Schedule",
        "choice",
        default="constant",
        choices=(("constant", "constant"), ("linear", "linear anneal")),
    ),
    sc.FieldSpec("end", "Anneal to", "float", default=0.0, min=-1000, max=1000),
    sc.FieldSpec("steps", "over steps", "int", default=0, min=0, max=10_000_000),
]
JUDGE_ROW = [
    sc.FieldSpec("name", "Judge", "text"),
    sc.FieldSpec(
        "backend",
        "Backend",
        "choice",
        default="rubric",
    ),  # choices: see judge_row()
    sc.FieldSpec(
        "model_path",
        "Judge model path",
        "text",
        optional=True,
        help="hf: local model dir.",
    ),
    sc.FieldSpec(
        "endpoint", "Endpoint", "text", optional=True, help="openai: endpoint name."
    ),
    sc.FieldSpec("model", "Model", "text", optional=True, help="openai: model name."),
    sc.FieldSpec("timeout_s", "Timeout (s)", "float", default=30.0, min=0, max=600),
    sc.FieldSpec("scale", "Scale", "float", default=10.0, min=0, max=1000),
    sc.FieldSpec("retries", "Retries", "int", default=2, min=0, max=10),
    sc.FieldSpec("max_tokens", "Max tokens", "int", default=256, min=1, max=8192),
]


def judge_row() -> list[sc.FieldSpec]:
    """JUDGE_ROW with the registered judge backends (plugins' too) as choices, each
    labelled by its factory's docstring."""
    from rewards.judges import JUDGE_BACKENDS

    choices = []
    for name in sorted(JUDGE_BACKENDS, key=lambda n: n != "rubric"):
        doc = (JUDGE_BACKENDS.get(name).__doc__ or "").strip().split("\n")[0]
        choices.append((name, f"{name} ({doc})" if doc else name))
    return [JUDGE_ROW[0], replace(JUDGE_ROW[1], choices=tuple(choices)), *JUDGE_ROW[2:]]


DIMENSION_ROW = [
    sc.FieldSpec("name", "Dimension", "text"),
    sc.FieldSpec("weight", "Weight", "float", default=1.0, min=0, max=1000),
    sc.FieldSpec(
        "check",
        "Check",
        "text",
        optional=True,
        help="rubric backend: the rule to run (defaults to the name).",
    ),
    sc.FieldSpec("description", "Rubric text", "text", default=""),
]
REWARD_TOP = [
    sc.FieldSpec(
        "reward.judge_aggregate",
        "Judge aggregate",
        "choice",
        default="mean",
        choices=(("mean", "mean"), ("min", "min"), ("median", "median")),
    ),
    sc.FieldSpec(
        "reward.detectors.window",
        "Detector window",
        "int",
        default=20,
        min=2,
        max=10_000,
    ),
    sc.FieldSpec(
        "reward.detectors.min_steps",
        "Detector min steps",
        "int",
        default=4,
        min=2,
        max=10_000,
    ),
    sc.FieldSpec(
        "reward.detectors.enabled",
        "Detectors",
        "multi",
        choices=DETECTOR_CHOICES,
        default=[c for c, _ in DETECTOR_CHOICES],
        help="Reward-hacking detectors to run (all checked: every one that applies).",
    ),
    sc.FieldSpec(
        "reward.detectors.thresholds",
        "Threshold overrides",
        "kv",
        optional=True,
        help="One per line: detector.threshold = value",
    ),
]


@dataclass
class Row:
    """One repeated group of inputs (a component, a judge, a rubric dimension)."""

    index: int
    prefix: str
    specs: list[sc.FieldSpec]
    extra: list[sc.FieldSpec] = field(default_factory=list)
    children: list[Row] = field(default_factory=list)
    kind: str = ""


def row_specs(base: list[sc.FieldSpec], prefix: str) -> list[sc.FieldSpec]:
    return [s.at(prefix) for s in base]
