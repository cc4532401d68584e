"""The embedded executor: runs execute in a one-thread pool inside the web process.

Used when there is no ``REDIS_URL`` (hence no Celery). It calls the same
``dashboard.tasks.execute_run`` code path as a Celery worker; runs execute one at a
time, in submission order. After a restart, :func:`recover` requeues what the
previous process left running (the same rule as the reaper, with no grace period
since nothing can still be alive) and resubmits queued runs.
"""

from __future__ import annotations

import logging
import threading
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
    from dashboard.tasks import execute_run

    close_old_connections()
    try:
        return execute_run.run(run_id)
    except Exception:
        log.exception("in-process run %s crashed", run_id)
        raise
    finally:
        connection.close()


def stop() -> None:
    """This process is exiting: runs not started stay queued (the next process's
    :func:`recover` submits them) and the one in progress stops at its next step."""
    from dashboard import execution

    execution.interrupt()
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)


def submit(run_id: str) -> Future:
    return _get_pool().submit(_execute, run_id)


def recover() -> list[str]:
    """Requeue runs orphaned by a previous process, then submit every queued run."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from dashboard import lease
    from dashboard.models import Run, RunStatus

    # Everything "running" belongs to a dead process: reap it as if long stale.
    later = timezone.now() + timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS + 1)
    lease.reap(now=later, enqueue=False)
    queued = Run.objects.filter(status=RunStatus.QUEUED).order_by("created_at")
    run_ids = [str(pk) for pk in queued.values_list("id", flat=True)]
    for run_id in run_ids:
        submit(run_id)
    return run_ids
