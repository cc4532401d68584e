"""The embedded executor: runs execute in a one-thread pool inside the web process.

Used when there is no ``REDIS_URL`` (hence no Celery). It calls the same
``dashboard.runs.execution.execute`` code path as a Celery worker; runs execute one at a
time, in submission order. After a restart, :func:`recover` requeues what the
previous process left running (the same rule as the reaper, with no grace period
since nothing can still be alive) and resubmits queued runs; it also starts the
housekeeping thread that marks silent external runs as lost (what ``reap_runs``
does in production).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import close_old_connections, connection

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-executor")
        return _pool


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


def stop() -> None:
    """This process is exiting: runs not started stay queued (the next process's
    :func:`recover` submits them) and the one in progress stops at its next step."""
    from dashboard.runs import execution

    execution.interrupt()
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)


def submit(run_id: str, queue: str = "") -> Future:
    """``RUN_SUBMIT`` in the embedded mode: one run at a time, in order (``queue`` is
    the Celery queue a worker would take it from; one pool serves both here)."""
    return _get_pool().submit(_execute, run_id)


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
