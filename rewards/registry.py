"""A name -> object registry that fails loudly (verl-style ``@register``).

Used for algorithms, losses, environments, reward components and judge backends.
Registering a name twice is an error; looking up an unknown name names the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise KeyError(f"unknown {self.kind} {name!r} (known: {known})") from None

    def in_order(self) -> list[str]:
        """Names in registration order (built-ins first, then plugins)."""
        return list(self._items)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))


# Judge backends by name (``rubric``, ``hf``, ``openai`` and plugins'): factories
# ``(JudgeConfig, JudgeDeps) -> Judge`` (``rewards.judges.base.JudgeFactory``). Here,
# beside the class, so that the config can list the names without importing judges.
JUDGE_BACKENDS: Registry[Any] = Registry("judge backend")
