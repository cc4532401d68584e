"""Differences between run configs: a clone against its parent, or 2-8 runs compared.

Configs are compared after :func:`dashboard.pages.forms.normalise` (defaults spelled
out), flattened to dotted paths; only paths whose values differ are reported, in the
order they appear in the configs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.pages.schema import flatten

MISSING = object()


@dataclass(frozen=True)
class DiffRow:
    path: str
    values: tuple[str, ...]  # one display string per config ("" when absent)


def _same(a: Any, b: Any) -> bool:
    if a is b or a == b:
        return True
    if a is MISSING or b is MISSING or isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    return fa == fb or (math.isnan(fa) and math.isnan(fb))


def display(value: Any) -> str:
    if value is MISSING:
        return "—"
    if value is None:
        return "default"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def diff(configs: Sequence[dict[str, Any]]) -> list[DiffRow]:
    """Rows where at least two of ``configs`` disagree (``configs`` already normalised)."""
    flats = [flatten(c) for c in configs]
    order: dict[str, None] = {}
    for flat in flats:
        order.update(dict.fromkeys(flat))
    rows = []
    for path in order:
        values = [flat.get(path, MISSING) for flat in flats]
        if all(_same(values[0], v) for v in values[1:]):
            continue
        rows.append(DiffRow(path, tuple(display(v) for v in values)))
    return rows
