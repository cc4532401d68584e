"""Stopping a run in the middle of a stage.

``should_stop`` (handed to ``trainer.loop.train``) is asked before every step; a step
can last minutes, most of them in generation, so the policy also asks it between
tokens (:meth:`trainer.policy.Policy.generate`) through :class:`Every`, which passes
the question on at most every ``seconds`` (a caller's check may be a database query).
A True there raises :class:`Stopped`, which the loop turns into a ``cancelled`` run.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Stopped(Exception):
    """The run was asked to stop inside a step; the step's work is dropped."""


class Every:
    """``should_stop``, asked at most every ``seconds``; once True, True for good."""

    def __init__(self, should_stop: Callable[[], bool], seconds: float = 0.2) -> None:
        self.should_stop = should_stop
        self.seconds = seconds
        self._next = 0.0
        self._stopped = False

    def __call__(self) -> bool:
        if self._stopped:
            return True
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.seconds
            self._stopped = bool(self.should_stop())
        return self._stopped
