"""Which test shows each config option's effect through the real loop.

A test that shows an option's effect says so with one line beside it::

    @covers("algorithm.value_clip")
    def test_the_value_clip_reaches_the_critic(...): ...

``tests/trainer/test_option_coverage.py`` walks the config schema and fails for an
option that has neither such a test nor an entry in its list of exemptions (each with
its reason). Options are dotted paths of the schema's fields
(``algorithm.rollout_correction.cap``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

# option path -> the tests ("module::name") that show its effect
COVERED: dict[str, list[str]] = {}


def covers(*paths: str) -> Callable[[F], F]:
    """Register the decorated test as showing the effect of the options ``paths``."""

    def mark(test: F) -> F:
        name = f"{test.__module__}::{test.__name__}"
        for path in paths:
            COVERED.setdefault(path, []).append(name)
        return test

    return mark
