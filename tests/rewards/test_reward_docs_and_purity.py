"""Every docstring example runs, and rewards/ stays free of Django, Channels, Celery."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import rewards

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(rewards.__path__, prefix="rewards.")
)


@pytest.mark.parametrize("name", MODULES)
def test_it_runs_the_docstring_examples_of(name):
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS
    )
    assert result.failed == 0


def test_it_never_imports_django_channels_or_celery():
    pattern = re.compile(r"^\s*(from|import) (django|channels|celery)\b", re.MULTILINE)
    root = Path(rewards.__file__).parent
    offenders = [p.name for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_it_keeps_modules_short():
    root = Path(rewards.__file__).parent
    long = {
        p.name: n
        for p in root.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}
