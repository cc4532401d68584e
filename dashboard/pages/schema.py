"""Form fields derived from the run schema (``trainer.config.TrainConfig``).

The schema is the single source of truth: labels, bounds, choices, defaults and help
text come from the pydantic models, so a field added to the trainer shows up in the
form without touching a template. A :class:`FieldSpec` knows its dotted path in the
config (``algorithm.clip_high``, ``reward.components.0.params.beta``), which is also
the input's ``name`` and the key its errors are filed under.

This module knows pydantic and the config models, not HTTP or templates.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, replace
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

# Fields the form renders elsewhere (or never): per model, by name.
_SKIP = {
    "TrainConfig": {
        "name",
        "seed",
        "steps",
        "model",
        "env",
        "rollout",
        "algorithm",
        "optim",
        "checkpoint",
        "eval",
        "reward",
    },
    "EnvConfig": {"name", "params"},
}


@dataclass(frozen=True)
class FieldSpec:
    """One input. ``kind``: int, float, bool, choice, multi, text or csv (a list of
    names typed comma-separated). ``optional``: blank means None (the default).
    ``words``: what a number input also accepts, as typed (``record.groups``:
    "auto"); ``blank_none``: blank means None even where the default is not
    (``record.groups``: blank is "all", the default "auto"); ``placeholder``: what a
    blank optional input shows (else "default")."""

    path: str
    label: str
    kind: str
    help: str = ""
    choices: tuple[tuple[str, str], ...] = ()
    default: Any = None
    optional: bool = False
    min: float | None = None
    max: float | None = None
    max_length: int | None = None
    words: tuple[str, ...] = ()
    blank_none: bool = False
    placeholder: str = ""

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def step(self) -> str:
        return "1" if self.kind == "int" else "any"

    @property
    def input_id(self) -> str:
        return "f-" + self.path.replace(".", "-")

    @property
    def default_text(self) -> str:
        return _text(self.default)

    def at(self, prefix: str) -> FieldSpec:
        """The same field under another container path."""
        return replace(self, path=f"{prefix}.{self.name}" if prefix else self.name)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else tp), True
    return tp, False


def _bounds(metadata: list[Any]) -> tuple[float | None, float | None, int | None]:
    lo = hi = length = None
    for m in metadata:
        if isinstance(m, Ge):
            lo = m.ge
        elif isinstance(m, Gt):
            lo = m.gt
        elif isinstance(m, Le):
            hi = m.le
        elif isinstance(m, Lt):
            hi = m.lt
        elif isinstance(m, MaxLen):
            length = m.max_length
    return lo, hi, length


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()


def field_spec(model: type[BaseModel], name: str, prefix: str) -> FieldSpec | None:
    """The spec of ``model.name`` at ``prefix.name``; None for nested models."""
    info = model.model_fields[name]
    tp, optional = _unwrap_optional(info.annotation)
    if info.default is not PydanticUndefined:
        default = info.default
    elif info.default_factory is not None:
        default = info.default_factory()
    else:
        default = None
    lo, hi, length = _bounds(info.metadata)
    common = {
        "path": f"{prefix}.{name}" if prefix else name,
        "label": _label(name),
        "help": info.description or "",
        "default": default,
        "optional": optional,
        "min": lo,
        "max": hi,
        "max_length": length,
    }
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = tuple((str(v), str(v)) for v in typing.get_args(tp))
        return FieldSpec(kind="choice", choices=choices, **common)
    if origin is list:
        (item,) = typing.get_args(tp)
        if typing.get_origin(item) is Literal:
            choices = tuple((str(v), str(v)) for v in typing.get_args(item))
            return FieldSpec(kind="multi", choices=choices, **common)
        # A list's max_length counts items, not the characters typed.
        return FieldSpec(kind="csv", **{**common, "max_length": None})
    if tp is bool:
        return FieldSpec(kind="bool", **common)
    if tp is int:
        return FieldSpec(kind="int", **common)
    if tp is float:
        return FieldSpec(kind="float", **common)
    if tp is str:
        return FieldSpec(kind="text", **common)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return None
    return FieldSpec(kind="text", **common)


def model_specs(model: type[BaseModel], prefix: str) -> list[FieldSpec]:
    """Specs of every scalar field of ``model`` (nested models are skipped)."""
    skip = _SKIP.get(model.__name__, set())
    out = []
    for name in model.model_fields:
        if name in skip:
            continue
        spec = field_spec(model, name, prefix)
        if spec is not None:
            out.append(spec)
    return out


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": [1, {"c": 2}]}}`` -> ``{"a.b.0": 1, "a.b.1.c": 2}``.

    Lists of scalars stay whole (one multi-valued field), as the form submits them.
    """
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}"))
    else:
        out[prefix] = value
    return out
