"""Pause and Resume: a run its owner stops for a while without losing it.

A queued run is paused at once (it leaves the queue; a task message already sent
finds it not ``queued`` and does nothing). A running one is asked to stop at its next
step (``pause_requested``, which the trainer's stop question reads): the trainer keeps
its state at the stop (``save_on_stop``: the last finished step, the warm start's
progress) and the attempt ends in ``lease.hold``, leaving the run ``paused`` with no
worker. Resume queues it again; the next attempt goes on from that state, so its
steps continue where they stopped. The time it spends paused is not its wall time
(an attempt's time is), and a pause is not one of its ``RUN_MAX_ATTEMPTS``.

A demo run's own pause (yielding to a user's run in the embedded mode) is another
thing: it goes back to the queue by itself (``lease.pause``).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from dashboard.errors import Conflict
from dashboard.live import frames
from dashboard.models import Run, RunStatus
from dashboard.runs import lease
from dashboard.runs.services import check_run_limit

NOT_OURS = (
    "run: an external run is trained elsewhere; pause or stop it in the trainer "
    "that runs it"
)


NOT_STARTED = "Paused by its owner before it started; Resume puts it back in the queue."


def do_pause_run(run: Run) -> Run:
    """Pause ``run``: a queued one now, a running one at its next step."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.external:
            raise Conflict(NOT_OURS)
        if run.status == RunStatus.QUEUED:
            run.status, run.enqueued_at = RunStatus.PAUSED, None
            run.error = (
                lease.held_note(f"after step {run.last_step}")
                if run.last_step
                else NOT_STARTED
            )
            run.save(update_fields=["status", "enqueued_at", "error"])
        elif run.status == RunStatus.RUNNING:
            if run.cancel_requested:
                raise Conflict("status: the run is being cancelled")
            run.pause_requested = True
            run.save(update_fields=["pause_requested"])
        elif run.status == RunStatus.PAUSED:
            raise Conflict("status: run is already paused")
        else:
            raise Conflict(f"status: run is already {run.status}")
        frames.send_on_commit(run.id)
    return run


def do_resume_run(run: Run) -> Run:
    """Queue a paused run again (the owner's limit of active runs applies)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status != RunStatus.PAUSED:
            raise Conflict(f"status: run is {run.status}, not paused")
        check_run_limit(run.owner)
        run.status, run.enqueued_at = RunStatus.QUEUED, timezone.now()
        run.pause_requested = run.cancel_requested = False
        run.error = ""
        run.save(
            update_fields=[
                "status",
                "enqueued_at",
                "pause_requested",
                "cancel_requested",
                "error",
            ]
        )
        lease.enqueue_on_commit(run)
        frames.send_on_commit(run.id)
    return run


pause_run = do_pause_run
resume_run = do_resume_run
