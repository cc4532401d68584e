"""Celery tasks: adapters that take ids, re-fetch, and call services."""

from __future__ import annotations

from celery import shared_task

from dashboard.runs import lease


@shared_task(name="dashboard.execute_run", ignore_result=True)
def execute_run(run_id: str) -> str:
    """Execute a queued run here, if its lease can be claimed (duplicates are no-ops)."""
    from dashboard.runs.execution import execute

    return execute(run_id)


def submit(run_id: str, queue: str) -> None:
    """``RUN_SUBMIT`` with Celery: send the run to its queue (``gpu`` or ``cpu``)."""
    from django.conf import settings

    execute_run.apply_async(args=[run_id], queue=f"{settings.RUN_QUEUE_PREFIX}{queue}")


@shared_task(name="dashboard.reap_runs", ignore_result=True)
def reap_runs() -> int:
    """Requeue runs whose worker stopped heartbeating (for celery beat, if used)."""
    from dashboard.runs.external import mark_lost

    return len(lease.reap()) + len(mark_lost())
