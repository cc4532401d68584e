"""trainer/ and rewards/ stay pure: no Django, Channels or Celery, ever."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "channels", "celery", "daphne", "redis", "dashboard", "ninja")


@pytest.mark.parametrize("package", ["trainer", "rewards"])
def test_it_never_imports_the_platform(package):
    offenders = []
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_importing_the_trainer_loads_no_platform_module():
    code = (
        "import sys, trainer.runner, trainer.cli, rewards;"
        f"bad=[m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
