"""File validation errors under the form input (or fieldset) that caused them.

Pydantic reports locations in the config (``('reward', 'components', 0, 'fbeta',
'params', 'beta')``); the form's inputs have dotted names that differ in three ways:
a component's union tag sits in the location but not in the name, environment
parameters live under ``envp.<env>.`` and rows deleted in the browser leave gaps in the
form's indices (``renames``). A model-level message that starts with ``field: `` is
moved onto that field when the form has it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from dashboard.pages import catalog
from trainer.config import clean_error_message

_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*): (.+)$", re.S)
_ALGO = re.compile(r"algorithm\.([a-z_]+)")


def _rename(path: str, renames: Mapping[str, str]) -> str:
    """Apply the longest matching compacted-row prefix."""
    best = ""
    for short in renames:
        if (path == short or path.startswith(short + ".")) and len(short) > len(best):
            best = short
    if not best:
        return path
    return renames[best] + path[len(best) :]


def normalise_loc(loc: Iterable[Any], env: str) -> list[str]:
    parts = [str(p) for p in loc]
    if (
        len(parts) > 3
        and parts[:2] == ["reward", "components"]
        and parts[3] in catalog.component_classes()
    ):
        del parts[3]
    if parts[:1] == ["env"]:
        rest = parts[1:]
        if rest[:1] and rest[0] in catalog.env_names():  # the union's tag
            rest = rest[1:]
        if rest[:1] == ["params"]:
            rest = rest[1:]
        if rest[:1] != ["name"]:
            parts = ["envp", env, *rest]
    return parts


class ErrorMap:
    """Collects ``path -> [messages]`` for the inputs and fieldsets in ``known``."""

    def __init__(self, known: set[str], renames: Mapping[str, str], env: str) -> None:
        self.known = known
        self.renames = renames
        self.env = env
        self.errors: dict[str, list[str]] = {}

    def _nearest(self, path: str) -> str:
        while path and path not in self.known:
            path = path.rpartition(".")[0]
        return path

    def add(self, parts: list[str], message: str) -> None:
        message = clean_error_message(message)
        normalised = normalise_loc(parts, self.env)
        path = self._nearest(_rename(".".join(normalised), self.renames))
        m = _PREFIX.match(message)
        if m:  # "field.path: message" from a model-level validator
            extra = normalise_loc([*normalised, *m.group(1).split(".")], self.env)
            candidate = _rename(".".join(extra), self.renames)
            if candidate in self.known:
                path, message = candidate, m.group(2)
            elif len(self._nearest(candidate)) > len(path):
                path = self._nearest(candidate)
        bucket = self.errors.setdefault(path, [])
        if message not in bucket:
            bucket.append(message)

    def add_validation_error(self, exc: ValidationError) -> None:
        for err in exc.errors(include_url=False):
            loc, msg = [str(p) for p in err["loc"]], clean_error_message(err["msg"])
            # A whole-config check names one field per line (format_errors splits
            # them the same way): each line goes under its own field.
            for line in msg.splitlines() if not loc else [msg]:
                self.add(loc, line)

    def add_line(self, line: str, prefix: str = "") -> None:
        """A ``field.path: message`` line (``format_errors`` / ``check_*`` style)."""
        loc, sep, message = line.partition(": ")
        if not sep:
            self.add([], line)
            return
        loc = loc.removeprefix("config.")
        parts = [p for p in f"{prefix}{loc}".split(".") if p and p != "(config)"]
        self.add(parts, message)

    def add_algorithm_conflict(self, message: str) -> None:
        """``resolve_algorithm`` names the fields in its message; file it under each."""
        names = dict.fromkeys(_ALGO.findall(message))
        for name in names or [""]:
            self.add(["algorithm", name] if name else ["algorithm"], message)
