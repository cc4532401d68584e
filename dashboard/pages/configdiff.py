"""Differences between run configs: a clone against its parent, or 2-8 runs compared.

Configs are compared after :func:`dashboard.pages.forms.normalise` (defaults spelled
out), flattened to dotted paths; only paths whose values differ are reported, in the
order they appear in the configs. Reward components, judges and rubric dimensions are
matched by name (a component by its label, else its name), not by position: two
environments' rewards share ``format`` even when it is the second component of one and
the fourth of the other. An empty list or mapping and an absent one are the same.

Configs of different frameworks (a run of ours against a TRL or verl run) share
almost no key: :func:`compare` lines up their well-known settings through the table
of ``trainer.config_keys`` and sets the keys only some of them have apart, for the
page to fold (issue 22.10e).

A sub-tree shown in one cell (a component only one run has) is cut at
:data:`SUMMARY_LIMIT` characters for the new-run form's narrow diff; the compare page
takes it whole (``limit=None``) and cuts it itself, with a way to open the whole value
(``templates/pages/partials/config_value.html``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.pages.charts import env_name
from dashboard.pages.schema import flatten
from trainer.config_keys import SETTINGS, ZERO_MEANS, framework_of, lookup

MISSING = object()
SUMMARY_LIMIT = 160  # characters of a sub-tree in one cell, where it is cut


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
    except (TypeError, ValueError, OverflowError):  # 10**400 has no float
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


def _by_name(items: Any, key: str, fallback: str = "") -> Any:
    """A list of dicts as a dict keyed by ``item[key]`` (``#2``, ``#3`` on repeats)."""
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return items
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        name = str(item.get(key) or item.get(fallback) or i)
        n, unique = 1, name
        while unique in out:
            n += 1
            unique = f"{name}#{n}"
        out[unique] = item
    return out


def keyed(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the reward's named lists turned into dicts by name."""
    reward = config.get("reward")
    if not isinstance(reward, dict):
        return config
    reward = dict(reward)
    if "components" in reward:
        reward["components"] = _by_name(reward["components"], "label", "name")
    judges = reward.get("judges")
    if isinstance(judges, list):
        judges = [
            {**j, "rubric": _by_name(j.get("rubric"), "name")}
            if isinstance(j, dict) and "rubric" in j
            else j
            for j in judges
        ]
        reward["judges"] = _by_name(judges, "name")
    return {**config, "reward": reward}


def _empty(value: Any) -> bool:
    return value is MISSING or (isinstance(value, list | dict) and not value)


def _summary(value: Any, limit: int | None = SUMMARY_LIMIT) -> str:
    """A whole sub-tree in one cell: ``weight=0.3, schedule.kind=linear, ...``; the
    fields left unset (None: their default) are not listed ("id_key=default" said
    nothing), and a sub-tree of nothing else is "default". Cut at ``limit``
    characters (None: whole)."""
    if not isinstance(value, dict):
        return display(value)
    text = ", ".join(
        f"{k}={display(v)}"
        for k, v in flatten(value).items()
        if k != "name" and v is not None
    )
    if not text:
        return display(None)
    if limit is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "\u2026"


def _walk(
    nodes: list[Any],
    path: str,
    whole: set[str],
    rows: list[DiffRow],
    limit: int | None = SUMMARY_LIMIT,
) -> None:
    if all(_empty(n) for n in nodes):
        return  # no judges here, [] there: not a difference
    dicts = [n for n in nodes if isinstance(n, dict)]
    if dicts and all(isinstance(n, dict) or n is MISSING for n in nodes):
        if path in whole or any(n is MISSING for n in nodes):
            # A component one run has and another has not is one row, not one per
            # field; so are another environment's parameters.
            if not all(_same_tree(nodes[0], n) for n in nodes[1:]):
                rows.append(DiffRow(path, tuple(_summary(n, limit) for n in nodes)))
            return
        keys: dict[str, None] = {}
        for d in dicts:
            keys.update(dict.fromkeys(d))
        for k in keys:
            child = f"{path}.{k}" if path else str(k)
            _walk([n.get(k, MISSING) for n in nodes], child, whole, rows, limit)
        return
    if all(_same(nodes[0], v) for v in nodes[1:]):
        return
    rows.append(DiffRow(path, tuple(display(v) for v in nodes)))


def _same_tree(a: Any, b: Any) -> bool:
    fa, fb = (
        flatten(a) if isinstance(a, dict) else a,
        flatten(b) if isinstance(b, dict) else b,
    )
    if isinstance(fa, dict) and isinstance(fb, dict):
        return fa.keys() == fb.keys() and all(_same(fa[k], fb[k]) for k in fa)
    return _same(fa, fb)


def diff(
    configs: Sequence[dict[str, Any]], limit: int | None = SUMMARY_LIMIT
) -> list[DiffRow]:
    """Rows where at least two of ``configs`` disagree (``configs`` already
    normalised); a sub-tree in one cell cut at ``limit`` characters (None: whole)."""
    trees = [keyed(c) for c in configs]
    envs = {env_name(c) for c in configs}
    whole = {"env.params"} if len(envs) > 1 else set()
    rows: list[DiffRow] = []
    _walk(trees, "", whole, rows, limit)
    return rows


@dataclass(frozen=True)
class MatchedRow:
    """A well-known setting across frameworks (``trainer.config_keys``)."""

    label: str
    values: tuple[str, ...]  # per config, "—" when it has no such setting
    paths: tuple[str, ...]  # where each config spells it ("" when absent)
    differ: bool

    @property
    def cells(self) -> list[tuple[str, str]]:
        return list(zip(self.values, self.paths, strict=True))


@dataclass(frozen=True)
class Comparison:
    matched: list[MatchedRow]  # only when the configs come from different frameworks
    rows: list[DiffRow]  # differences of keys every config has (or all of them)
    other: list[DiffRow]  # keys only some configs have, folded on the page


def _matched(flats: list[dict[str, Any]], frameworks: list[str]) -> list[MatchedRow]:
    rows = []
    for label, _ in SETTINGS:
        found = [lookup(f, fw, label) for f, fw in zip(flats, frameworks, strict=True)]
        if not any(path for path, _ in found):
            continue
        values = [v if path else MISSING for path, v in found]
        # A setting one trainer does not have is not a disagreement.
        known = [v for v in values if v is not MISSING]
        differ = not all(_same(known[0], v) for v in known[1:])
        rows.append(
            MatchedRow(
                label,
                tuple(
                    _display(v, fw, p)
                    for v, fw, (p, _) in zip(values, frameworks, found, strict=True)
                ),
                tuple(path for path, _ in found),
                differ,
            )
        )
    return rows


def _display(value: Any, framework: str, path: str) -> str:
    """A matched setting's value; one of ours whose 0 means something says what
    ("0 (no limit)")."""
    meaning = ZERO_MEANS.get(path) if framework == "ours" else None
    return f"0 ({meaning})" if meaning and value == 0 else display(value)


def compare(configs: Sequence[dict[str, Any]]) -> Comparison:
    """:func:`diff` for the compare page. Configs of different frameworks (ours, TRL,
    verl) first line up their well-known settings; the keys those take are left out of
    the rows, and keys only some configs have are set apart (``other``). Values are
    whole: the page cuts a long one with a way to read it all."""
    rows = diff(configs, limit=None)
    flats = [flatten(c) for c in configs]
    frameworks = [framework_of(f) for f in flats]
    if len(set(frameworks)) < 2:
        return Comparison([], rows, [])
    matched = _matched(flats, frameworks)
    taken = {p for m in matched for p in m.paths if p}
    rest = [r for r in rows if r.path not in taken]
    # A key every config has as a leaf; a name one framework uses for a section and
    # another for a value (our ``optim`` settings, TRL's ``optim`` optimiser) is not.
    shared = [r for r in rest if all(r.path in f for f in flats)]
    return Comparison(matched, shared, [r for r in rest if r not in shared])
