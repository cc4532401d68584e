"""Plugins: the user's own environments, reward components, tools and judges.

A plugin is an importable module that registers into the existing registries when it
is imported (``@ENVIRONMENTS.register``, ``@register_component(name, params=...)``,
``TOOLS.register``, ``JUDGE_BACKENDS.register``, ``RUBRIC_CHECKS.register``). Modules
are named by the platform's ``PLUGINS`` setting, by ``python -m trainer run --plugin
MODULE``, or by a package's ``agentic_rl.plugins`` entry points (an entry point may
also name a function, which is called once with no arguments).

:func:`load_plugins` is the one loader of web, worker and CLI: it imports each plugin
once, then rebuilds the run schema (:func:`trainer.config.refresh_schema`) so the
form, ``/api/config/schema`` and the CLI see what the plugins registered. A plugin
that fails to import is a :class:`PluginError` naming it. Pure: no Django here, and no
environment variables (the callers pass the list).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Iterable

ENTRY_POINT_GROUP = "agentic_rl.plugins"

_loaded: set[str] = set()


class PluginError(ImportError):
    """A plugin that could not be imported or registered; the message names it."""


def _import(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure is the plugin's, say whose
        raise PluginError(
            f"plugin {name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc


def _load_entry_point(ep: importlib.metadata.EntryPoint) -> None:
    try:
        obj = ep.load()
        if callable(obj) and not inspect.ismodule(obj):
            obj()
    except Exception as exc:  # noqa: BLE001
        raise PluginError(
            f"plugin {ep.value!r} (entry point {ep.name!r} in {ENTRY_POINT_GROUP}) "
            f"failed to load: {type(exc).__name__}: {exc}"
        ) from exc


def load_plugins(
    modules: Iterable[str] = (), *, entry_points: bool = True
) -> list[str]:
    """Import the plugin ``modules`` and (with ``entry_points``) every entry point of
    the ``agentic_rl.plugins`` group, each at most once per process; returns what was
    loaded by this call. Raises :class:`PluginError` naming the first that fails."""
    loaded: list[str] = []
    for name in (m.strip() for m in modules):
        if name and name not in _loaded:
            _import(name)
            _loaded.add(name)
            loaded.append(name)
    if entry_points:
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.value not in _loaded:
                _load_entry_point(ep)
                _loaded.add(ep.value)
                loaded.append(ep.value)
    if loaded:
        from trainer.config import refresh_schema

        refresh_schema()
    return loaded


def forget(name: str) -> None:
    """Let ``name`` load again (tests that restore the registries after a plugin)."""
    _loaded.discard(name)
