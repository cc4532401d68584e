"""A cancel always stops a run: the watch beside every run a process executes.

The trainer asks ``should_stop`` before every step and, at most five times a second,
between generated tokens (``trainer.stopping.Every``). Beside it, this watch asks the
database (``lease.should_stop``: a cancel, or a lease that is no longer ours) every
:data:`POLL_S` seconds from a thread of its own, sets ``requested`` (which the
trainer's question reads first) and keeps the time.

A run that does not stop within ``RUN_CANCEL_GRACE_SECONDS`` of the cancel (a stage
that never reaches a stop check: a judge that does not answer, a long scoring pass) is
ended here: the run is marked ``cancelled`` through its lease first, so it is never
left ``running``, then the process running it is terminated. For a Celery worker
that is this prefork child (SIGKILL; the pool starts a fresh one, the broker's
redelivery finds the run finished); in the embedded mode (or any direct call), where
the run is a thread of a process that must live on, :class:`~trainer.stopping.Stopped`
is raised in that thread, which ends it at its next Python bytecode.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from dashboard.models import RunStatus
from dashboard.runs import lease
from dashboard.runs.lease import Claim

log = logging.getLogger(__name__)
POLL_S = 1.0  # how often the watch reads the run's row


def kill_this_process() -> None:
    """A Celery child ends at once; the pool replaces it."""
    os.kill(os.getpid(), signal.SIGKILL)


def raise_in_thread(thread_id: int) -> Callable[[], None]:
    """The embedded executor's terminate: ``Stopped`` raised inside the run's thread."""
    from trainer.stopping import Stopped

    def terminate() -> None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread_id), ctypes.py_object(Stopped)
        )

    return terminate


def default_terminate() -> Callable[[], None]:
    """How to end the run the calling thread executes: the process, when that is a
    Celery worker's child executing the task; else (the embedded executor, a direct
    call) that thread alone."""
    from celery import current_task

    request = current_task.request if current_task else None
    if request is not None and not (request.called_directly or request.is_eager):
        return kill_this_process
    return raise_in_thread(threading.get_ident())


class CancelWatch:
    """Watches ``claim``'s run while this process trains it (``with`` block)."""

    def __init__(
        self,
        claim: Claim,
        *,
        grace_s: float | None = None,
        terminate: Callable[[], None] | None = None,
    ) -> None:
        self.claim = claim
        self.grace_s = settings.RUN_CANCEL_GRACE_SECONDS if grace_s is None else grace_s
        self.terminate = terminate or default_terminate()
        self.requested = threading.Event()  # the trainer's cheap question
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name=f"cancel-{claim.run_id}", daemon=True
        )

    def __enter__(self) -> CancelWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=POLL_S * 5)

    def _watch(self) -> None:
        try:
            while not self._done.wait(POLL_S):
                if self._asked():
                    break
            else:
                return
            self.requested.set()
            if self._waited_out():
                self._end()
        finally:
            connection.close()

    def _waited_out(self) -> bool:
        """Wait for the trainer to stop: ``grace_s`` from a cancel, the longer
        ``RUN_PAUSE_GRACE_SECONDS`` from its owner's pause (the state is kept at the
        next step, which may be far); a cancel that comes during a pause's wait is
        given its own grace from then. False once the trainer stopped."""
        start = time.monotonic()
        pause_grace = max(self.grace_s, float(settings.RUN_PAUSE_GRACE_SECONDS))
        cancelled_at = None
        while True:
            pausing = lease.pause_asked(self.claim)
            now = time.monotonic()
            if not pausing and cancelled_at is None:
                cancelled_at = now
            deadline = start + pause_grace if pausing else cancelled_at + self.grace_s
            if self._done.wait(max(0.0, min(POLL_S, deadline - now))):
                return False  # the trainer stopped by itself
            if time.monotonic() >= deadline:
                return True

    def _asked(self) -> bool:
        return lease.stop_asked(self.claim)

    def _end(self) -> None:
        """Past the grace period: cancelled (if the lease is still ours), then the
        process or thread running it is stopped."""
        message = (
            f"did not stop within {self.grace_s:g} s of the cancel; its process was "
            "terminated"
        )
        log.warning("run %s: %s", self.claim.run_id, message)
        try:
            if lease.pause_asked(self.claim):  # its owner's pause: paused, not ended
                lease.hold(self.claim, None, lease.CUT_SHORT)
            else:
                lease.finish(self.claim, RunStatus.CANCELLED, message=message)
        except (OperationalError, InterfaceError):
            log.exception("run %s: could not record the cancel", self.claim.run_id)
        if not self._done.is_set():
            self.terminate()
