"""The embedded executor: runs execute one at a time in a thread of the web process.

Used when there is no ``REDIS_URL`` (hence no Celery). It calls the same
``dashboard.runs.execution.execute`` code path as a Celery worker. Runs execute one
at a time: a user's own runs before demo runs, each kind in submission order
(``dashboard.runs.waiting.line_order``); a demo run in progress when a user's run is
submitted pauses at its next step (``execution.pause_demo``: back to ``queued``,
resumed from its last checkpoint afterwards), so a newcomer's first run never waits
behind the half-hour demo. After a restart, :func:`recover` requeues what the
previous process left running (the same rule as the reaper, with no grace period
since nothing can still be alive) and resubmits queued runs; it also starts the
housekeeping thread that marks silent external runs as lost (what ``reap_runs``
does in production).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

from django.db import close_old_connections, connection

log = logging.getLogger(__name__)

_lock = threading.Condition()
_pending: dict[str, list[Future]] = {}  # submitted, not started: their callers
_current: dict[str, object] = {}  # the run executing now: {"id", "demo"}
_worker: threading.Thread | None = None
_stopping = False


def _execute(run_id: str) -> str:
    from dashboard.runs.execution import execute

    close_old_connections()
    try:
        return execute(run_id)
    except Exception:
        log.exception("in-process run %s crashed", run_id)
        raise
    finally:
        connection.close()


def _next() -> tuple[str, bool] | None:
    """The submitted run to start now (``line_order``) and whether it is a demo."""
    from dashboard.models import Run
    from dashboard.runs.waiting import line_order

    with _lock:
        ids = list(_pending)
    if not ids:
        return None
    close_old_connections()
    try:
        row = (
            Run.objects.filter(pk__in=ids)
            .order_by(*line_order())
            .values_list("id", "demo")
            .first()
        )
    finally:
        connection.close()
    if row is None:  # deleted runs: nothing to do for them
        return ids[0], False
    return str(row[0]), bool(row[1])


def _loop() -> None:
    from dashboard.runs import execution

    while True:
        with _lock:
            while not _pending and not _stopping:
                _lock.wait()
            if _stopping:
                return
        picked = _next()
        if picked is None:
            continue
        run_id, demo = picked
        with _lock:
            futures = _pending.pop(run_id, [])
            _current.update(id=run_id, demo=demo)
            # A user's run submitted before this one started: nothing to pause for.
            execution.clear_pause()
        try:
            result = _execute(run_id)
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            for f in futures:
                f.set_exception(exc)
        else:
            for f in futures:
                f.set_result(result)
        finally:
            with _lock:
                _current.clear()


def _start_worker() -> None:
    global _worker
    if _worker is None or not _worker.is_alive():
        _worker = threading.Thread(target=_loop, name="run-executor", daemon=True)
        _worker.start()


def stop(wait_s: float = 0.0) -> bool:
    """This process is exiting: runs not started stay queued (the next process's
    :func:`recover` submits them) and the one in progress stops at its next step.
    ``wait_s``: how long to wait for it to get there (its thread is a daemon: an
    interpreter that exits while it is inside a tensor operation can crash on the
    way out, "Segmentation fault" or "terminate called without an active
    exception"). True when no run is left executing."""
    global _stopping
    from dashboard.runs import execution

    execution.interrupt()
    with _lock:
        _stopping = True
        for futures in _pending.values():
            for f in futures:
                f.cancel()
        _pending.clear()
        _lock.notify_all()
        worker = _worker
    if worker is None or worker is threading.current_thread():
        return True
    worker.join(wait_s)
    return not worker.is_alive()


def executing() -> bool:
    """Whether a run is executing in this process now."""
    with _lock:
        return bool(_current)


def submit(run_id: str, queue: str = "") -> Future:
    """``RUN_SUBMIT`` in the embedded mode (``queue`` is the Celery queue a worker
    would take it from; one executor serves all here). A user's run pauses the demo
    in progress."""
    from dashboard.models import Run
    from dashboard.runs import execution

    future: Future = Future()
    with _lock:
        _pending.setdefault(str(run_id), []).append(future)
        demo_running = bool(_current.get("demo")) and _current.get("id") != run_id
        _start_worker()
        _lock.notify_all()
    if demo_running and Run.objects.filter(pk=run_id, demo=False).exists():
        execution.pause_demo()
    return future


def recover() -> list[str]:
    """Requeue runs orphaned by a previous process, then submit every queued run."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from dashboard.models import Run, RunStatus
    from dashboard.runs import lease

    # Everything "running" belongs to a dead process: reap it as if long stale.
    later = timezone.now() + timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS + 1)
    lease.reap(now=later, enqueue=False)
    queued = Run.objects.filter(status=RunStatus.QUEUED).order_by("created_at")
    run_ids = [str(pk) for pk in queued.values_list("id", flat=True)]
    for run_id in run_ids:
        submit(run_id)
    return run_ids


_housekeeper: threading.Thread | None = None


def start_housekeeping(interval_s: float = 30.0) -> None:
    """Mark silent external runs lost every ``interval_s`` (the embedded mode has no
    Celery beat); ``serve`` starts it once."""
    global _housekeeper
    with _lock:
        if _housekeeper is not None:
            return
        _housekeeper = threading.Thread(
            target=_housekeep, args=(interval_s,), name="housekeeping", daemon=True
        )
        _housekeeper.start()


def _housekeep(interval_s: float) -> None:
    from dashboard.runs.external import mark_lost

    while True:
        time.sleep(interval_s)
        close_old_connections()
        try:
            mark_lost()
        except Exception:  # a database blip must not end housekeeping
            log.exception("marking lost external runs failed")
        finally:
            connection.close()
