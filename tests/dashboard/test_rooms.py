"""dashboard/ is rooms by concept, and each room imports only the rooms below it.

The table is the one in ``docs/architecture.md``: the write side (``ingest``) never
reads through the read side, ``live`` knows only the models, and the adapters
(``api``, ``pages``, ``management``) sit on top. The root holds the Django project
(settings, urls, asgi, celery, models, routing, consumers, admin) and the two modules
every room shares (``jsonsafe``, ``errors``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboard"

# root modules any room may import (site_models: the site's tables, re-exported by models)
SHARED = {"models", "site_models", "jsonsafe", "errors"}
ALLOWED = {
    "site": set(),
    "live": set(),
    "library": {"site"},
    "ingest": {"live", "site"},
    "runs": {"ingest", "live", "library", "site"},
    "reads": {"ingest", "live", "library", "site"},
    "api": {"reads", "runs", "ingest", "live", "library", "site"},
    "pages": {"reads", "runs", "ingest", "live", "library", "site"},
    "management": {"reads", "runs", "ingest", "live", "library", "site"},
}
ROOT_MODULES = {
    "__init__",
    "admin",
    "apps",
    "asgi",
    "celery",
    "consumers",
    "errors",
    "jsonsafe",
    "models",
    "routing",
    "settings",
    "site_models",
    "urls",
}


def _room_of(path: Path) -> str:
    parts = path.relative_to(DASHBOARD).parts
    return parts[0] if len(parts) > 1 else f"root:{path.stem}"


def _imported(path: Path) -> set[str]:
    """The rooms (or ``root:<module>``) that ``path`` imports from dashboard/."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
            continue
        segs = node.module.split(".")
        if segs[0] != "dashboard":
            continue
        heads = [segs[1]] if len(segs) > 1 else [a.name for a in node.names]
        for head in heads:
            out.add(head if head in ALLOWED else f"root:{head}")
    return out


def _modules() -> list[Path]:
    return [p for p in DASHBOARD.rglob("*.py") if "migrations" not in p.parts]


def test_the_root_holds_only_the_project_and_the_shared_modules():
    assert {p.stem for p in DASHBOARD.glob("*.py")} == ROOT_MODULES
    rooms = {p.name for p in DASHBOARD.iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED) | {"migrations"}


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_each_room_has_a_docstring_at_its_door(room):
    doc = ast.get_docstring(ast.parse((DASHBOARD / room / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"dashboard/{room}/__init__.py says what lives there"


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_a_room_imports_only_the_rooms_below_it(room):
    allowed = ALLOWED[room] | {room} | {f"root:{m}" for m in SHARED}
    offenders = [
        f"{p.relative_to(ROOT)} imports {dst}"
        for p in _modules()
        if _room_of(p) == room
        for dst in sorted(_imported(p) - allowed)
    ]
    assert offenders == []


def test_the_shared_root_modules_import_no_room():
    offenders = [
        f"{p.relative_to(ROOT)} imports {dst}"
        for p in _modules()
        if _room_of(p) in {f"root:{m}" for m in SHARED}
        for dst in sorted(_imported(p) - {f"root:{m}" for m in SHARED})
    ]
    assert offenders == []


def test_the_app_never_imports_its_test_fixtures():
    offenders = [
        f"{p.relative_to(ROOT)}: {n.module}"
        for p in _modules()
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tests")
    ]
    assert offenders == []
