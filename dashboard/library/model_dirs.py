"""The model directories under ``MODEL_ROOTS``, for the new-run form's picker.

A model directory is one holding ``config.json``, at most two levels below a root.
For each: its name (relative to its root), its parameter count and whether its
tokenizer has a chat template, all read from small files: the safetensors headers
(exact), else the shapes implied by a Llama/Qwen-style ``config.json`` (weights are
never loaded). The scan is bounded (depth 2, :data:`MAX_MODELS` models,
:data:`MAX_DIRS` directories looked at) and cached for ``MODEL_SCAN_SECONDS``.

Users see a model as its root's label (the root directory's own name) and its path
relative to that root, which is also what the picker puts in ``model.path`` (a relative
path resolves against the roots in order, :func:`dashboard.library.roots.resolve`);
never the server's absolute path, staff included: the relative path is enough to pick
and to find the model, and one rendering for everyone has no branch that can leak.
A directory shadowed by the same relative path in an earlier root is not offered (the
path would name the earlier one).
"""

from __future__ import annotations

import json
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from dashboard.library import roots

MAX_DEPTH = 2
MAX_MODELS = 200
MAX_DIRS = 2000
MAX_HEADER_BYTES = 16 << 20
_cache: dict[tuple[str, ...], tuple[float, list[ModelDir]]] = {}


@dataclass(frozen=True)
class ModelDir:
    name: str  # relative to its root: what model.path gets
    root: str  # the root's label (:func:`root_labels`)
    params: int | None
    chat_template: bool
    readable: bool = True  # False: its config.json is not a JSON object we can read

    @property
    def params_text(self) -> str:
        n = self.params
        if not self.readable:
            return "unreadable config.json"
        if n is None:
            return "?"
        for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if n >= size:
                return f"{n / size:.3g}{unit}"
        return str(n)


def list_models() -> list[ModelDir]:
    key = tuple(str(r) for r in roots.model_roots())
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and now - hit[0] < settings.MODEL_SCAN_SECONDS:
        return hit[1]
    found = scan(roots.model_roots())
    _cache.clear()
    _cache[key] = (now, found)
    return found


def clear_cache() -> None:
    _cache.clear()


def root_labels(model_roots: list[Path]) -> list[str]:
    """Each root's name for users: its directory's own name (``models`` for
    ``/srv/models``), numbered where two roots share one."""
    names = [Path(r).name or "root" for r in model_roots]
    return [f"{n} ({i + 1})" if names.count(n) > 1 else n for i, n in enumerate(names)]


def scan(model_roots: list[Path]) -> list[ModelDir]:
    out: list[ModelDir] = []
    seen: set[str] = set()
    budget = [MAX_DIRS]
    for root, label in zip(model_roots, root_labels(model_roots), strict=True):
        for path in _walk(Path(root), 0, budget):
            if len(out) >= MAX_MODELS:
                return out
            name = path.relative_to(root).as_posix()
            real = roots.resolve(name, model_roots, want_dir=True)
            if name in seen or real is None or real != os.path.realpath(path):
                continue  # shadowed by an earlier root, or a symlink out of the roots
            seen.add(name)
            out.append(
                ModelDir(
                    name=name,
                    root=label,
                    params=param_count(Path(real)),
                    chat_template=has_chat_template(Path(real)),
                    readable=_json(Path(real) / "config.json") is not None,
                )
            )
    return out


def _walk(d: Path, depth: int, budget: list[int]):
    if depth > MAX_DEPTH or budget[0] <= 0:
        return
    budget[0] -= 1
    if depth and (d / "config.json").is_file():
        yield d
        return
    try:
        children = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError:
        return
    for entry in children:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        yield from _walk(Path(entry.path), depth + 1, budget)


def has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").is_file() or (
        path / "chat_template.json"
    ).is_file():
        return True
    cfg = _json(path / "tokenizer_config.json") or {}
    return bool(cfg.get("chat_template"))


def param_count(path: Path) -> int | None:
    files = sorted(path.glob("*.safetensors"))[:256]
    if files:
        total = 0
        for f in files:
            n = safetensors_params(f)
            if n is None:
                break
            total += n
        else:
            return total if total < 2**63 else None
    return config_params(_json(path / "config.json") or {})


def safetensors_params(path: Path) -> int | None:
    """Parameters in a safetensors file, from its JSON header alone."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > MAX_HEADER_BYTES:
                return None
            header = json.loads(fh.read(size), parse_constant=_no_constant)
        total = 0
        for name, info in header.items():
            if name != "__metadata__":
                n = 1
                for dim in info["shape"]:
                    n *= int(dim)
                total += n
        return total
    except (OSError, ValueError, KeyError, TypeError, OverflowError, struct.error):
        return None


def config_params(cfg: dict[str, Any]) -> int | None:
    """A decoder-only Llama/Qwen/Mistral-style model's parameters from its config
    (``trainer.budget.llama_params``); None when the keys are missing or absurd."""
    from trainer.budget import shape_from_hf_config

    shape = shape_from_hf_config(cfg, dtype_bytes=4)
    if shape is None:
        return None
    return shape.params if 0 <= shape.params < 2**63 else None  # absurd: unknown


def read_config(path: str | Path) -> dict[str, Any] | None:
    """A model directory's ``config.json`` as a dict, or None (missing, unreadable)."""
    return _json(Path(path) / "config.json")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # 1e999 reads as inf
        raise ValueError(f"{text} is past the range of a float")
    return value


def _json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when missing, too big, not an object or
    holding a number no float holds (``1e999``, ``NaN``)."""
    try:
        if path.stat().st_size > MAX_HEADER_BYTES:
            return None
        data = json.loads(
            path.read_text(encoding="utf-8"),
            parse_float=_finite,
            parse_constant=_no_constant,
        )
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
