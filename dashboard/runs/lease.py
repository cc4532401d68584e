"""Who executes a run: enqueueing, the lease a worker claims, heartbeats, the reaper.

A run is executed by whoever claims it: the claim turns ``queued`` into ``running``,
increments ``attempt`` and stores a fresh ``lease`` token; every later write of that
executor (heartbeats, sink batches, the final status) is fenced on the token, so a
worker that lost its lease (it stalled and was reaped) can no longer touch the run.
Duplicate task messages (Redis redelivery, a requeue racing a late worker) find the run
not ``queued`` and do nothing, so message delivery need not be exactly-once.

The reaper marks runs whose heartbeat stopped as ``unresponsive`` and requeues them
while attempts remain; a requeued run resumes from its last checkpoint. A worker whose
run of several processes lost one of them (``requeue``) applies the same rule at once.

Every claim opens a ``RunAttempt`` row and every ending closes it (finished, or reaped),
so the run keeps one error, that of how it ended, and each attempt its own.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from dashboard.live import frames
from dashboard.models import Run, RunAttempt, RunStatus

log = logging.getLogger(__name__)
# An attempt's outcome: a demo run yielded (:func:`pause`), or its owner paused the
# run (:func:`hold`).
PAUSED = "paused"


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a run, for one attempt."""

    run_id: uuid.UUID
    token: uuid.UUID
    attempt: int
    config: dict[str, Any]


def enqueue(run_id: Any, queue: str) -> bool:
    """Hand a run to its executor (``RUN_SUBMIT``: the Celery task's ``submit``, or the
    in-process executor's). Call through ``transaction.on_commit`` only. False when
    the executor refused it.

    A broker outage must not turn a committed launch into an error page, nor hold it:
    the send fails fast (``CELERY_BROKER_TRANSPORT_OPTIONS``), the run stays queued
    with ``enqueued_at`` cleared, and the reaper's next pass sends it once the broker
    answers (:func:`send_unsent`).
    """
    try:
        import_string(settings.RUN_SUBMIT)(str(run_id), queue)
    except Exception as exc:  # kombu OperationalError, redis ConnectionError...
        log.error(
            "run %s: could not send the task (%r); the reaper will resend it",
            run_id,
            exc,
        )
        Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(enqueued_at=None)
        return False
    return True


def enqueue_on_commit(run: Run) -> None:
    transaction.on_commit(partial(enqueue, run.id, run.queue))


def claim(run_id: Any) -> Claim | None:
    """Take the run if it is queued; None when finished, cancelled or held elsewhere."""
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != RunStatus.QUEUED:
            return None
        if run.cancel_requested:
            run.status, run.finished_at = RunStatus.CANCELLED, now
            run.save(update_fields=["status", "finished_at"])
            frames.send_on_commit(run.id)
            return None
        fields = ["status", "attempt", "lease", "heartbeat_at", "started_at"]
        if RunAttempt.objects.filter(
            run=run, number=run.attempt, outcome=PAUSED
        ).exists():  # its note said it would resume: now it does
            run.error = ""
            fields.append("error")
        run.status = RunStatus.RUNNING
        run.attempt += 1
        run.lease = uuid.uuid4()
        run.heartbeat_at = now
        run.started_at = run.started_at or now
        run.save(update_fields=fields)
        RunAttempt.objects.update_or_create(
            run=run, number=run.attempt, defaults={"started_at": now}
        )
        frames.send_on_commit(run.id)
    return Claim(run.id, run.lease, run.attempt, run.config)


def claim_of(run_id: Any, attempt: int) -> Claim | None:
    """The claim a worker holds on ``attempt`` of a run, read back by the processes it
    started (``dashboard.runs.rank``); None once that attempt no longer holds the run."""
    row = (
        Run.objects.filter(
            pk=run_id, attempt=attempt, status=RunStatus.RUNNING, lease__isnull=False
        )
        .values_list("id", "lease", "config")
        .first()
    )
    return None if row is None else Claim(row[0], row[1], attempt, row[2])


def held_by(claim: Claim):
    return Run.objects.filter(
        pk=claim.run_id, lease=claim.token, status=RunStatus.RUNNING
    )


def heartbeat(claim: Claim) -> bool:
    """Refresh the lease; False when it was lost (reaped, or the run is gone)."""
    return held_by(claim).update(heartbeat_at=timezone.now()) == 1


def should_stop(claim: Claim) -> bool:
    """The trainer's per-step question: cancelled or paused, or no longer ours?"""
    row = (
        Run.objects.filter(pk=claim.run_id)
        .values_list("cancel_requested", "pause_requested", "lease", "status")
        .first()
    )
    if row is None or row[0] or row[1]:
        return True
    return row[2] != claim.token or row[3] != RunStatus.RUNNING


def pause_asked(claim: Claim) -> bool:
    """Its owner paused the run, and did not cancel it: the trainer keeps its state
    at the stop (``save_on_stop``) and the attempt ends in :func:`hold`. A database
    blip answers no (the run then resumes from its last checkpoint)."""
    try:
        row = (
            Run.objects.filter(pk=claim.run_id, lease=claim.token)
            .values_list("pause_requested", "cancel_requested")
            .first()
        )
    except (OperationalError, InterfaceError) as exc:
        log.warning("run %s: pause check failed: %r", claim.run_id, exc)
        connection.close()
        return False
    return row is not None and row[0] and not row[1]


def stop_asked(claim: Claim) -> bool:
    """``should_stop`` for a loop that must not die of a database blip (a locked
    SQLite file, a restarted PostgreSQL): the error is logged, the connection closed
    (the next question opens a new one) and the answer is no. A rank that raised
    here would leave the others waiting in a collective it never joins."""
    try:
        return should_stop(claim)
    except (OperationalError, InterfaceError) as exc:
        log.warning("run %s: stop check failed: %r", claim.run_id, exc)
        connection.close()
        return False


def finish(
    claim: Claim,
    status: str,
    *,
    message: str = "",
    detail: str = "",
    last_step: int | None = None,
) -> bool:
    """Record the outcome of this attempt, if the lease is still ours.

    ``message`` (one line) becomes the run's error, replacing whatever an earlier
    attempt said: a run that succeeded on attempt 2 shows no error, and its attempts
    keep their own history. ``detail`` (a traceback) goes on the attempt only."""
    now = timezone.now()
    fields: dict[str, Any] = {
        "status": status,
        "finished_at": now,
        "lease": None,
        "error": message[:500],
        "pause_requested": False,  # a pause that came as it ended: nothing to hold
    }
    if last_step is not None:
        fields["last_step"] = last_step
    with transaction.atomic():
        done = held_by(claim).update(**fields) == 1
        if done:
            end_attempt(claim.run_id, claim.attempt, status, message, detail, now)
            frames.send_on_commit(claim.run_id)
    return done


def end_attempt(
    run_id: Any,
    number: int,
    outcome: str,
    message: str,
    detail: str = "",
    now: datetime | None = None,
) -> None:
    """Close attempt ``number`` (created if it predates attempt records)."""
    now = now or timezone.now()
    values = {
        "ended_at": now,
        "outcome": outcome,
        "message": message[:500],
        "detail": detail[-20000:],
    }
    RunAttempt.objects.update_or_create(
        run_id=run_id,
        number=number,
        defaults=values,
        create_defaults={**values, "started_at": now},
    )


def reap(now: datetime | None = None, *, enqueue: bool = True) -> list[uuid.UUID]:
    """Requeue (or give up on) runs whose heartbeat stopped; with Celery, also send
    the queued runs whose task never reached the broker, and again those nobody
    claimed for ``RUN_RESEND_QUEUED_SECONDS``. Returns the ids requeued or sent.
    ``enqueue=False`` leaves them queued for the caller to submit."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS)
    requeued: list[uuid.UUID] = []
    with transaction.atomic():
        stale = Run.objects.select_for_update(skip_locked=True).filter(
            status=RunStatus.RUNNING, heartbeat_at__lt=cutoff, external=False
        )
        for run in stale:
            ended = RunAttempt.objects.filter(
                run=run, number=run.attempt, ended_at__isnull=False
            ).first()
            if ended is not None:  # it said why it stopped (the server stopped)
                note = ended.message
            else:
                note = f"heartbeat stopped at {run.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC"
                end_attempt(run.id, run.attempt, RunStatus.UNRESPONSIVE, note, now=now)
            if _take_back(run, note, now, RunStatus.UNRESPONSIVE, enqueue=enqueue):
                requeued.append(run.id)
        if enqueue and settings.RUN_EXECUTOR == "celery":
            requeued += _resend_unclaimed(now)
    if enqueue and settings.RUN_EXECUTOR == "celery":
        requeued += send_unsent()
    return requeued


def requeue(claim: Claim, note: str, detail: str = "") -> bool:
    """This attempt ended without a verdict on the run (one of its processes died
    without a word): close it and take the run back now, by the reaper's rule (queued
    again while attempts remain, else failed). False when the lease was not ours."""
    now = timezone.now()
    with transaction.atomic():
        run = held_by(claim).select_for_update().first()
        if run is None:
            return False
        end_attempt(run.id, run.attempt, RunStatus.FAILED, note, detail, now)
        _take_back(run, note, now, RunStatus.FAILED, enqueue=True)
    return True


_PAUSED_FOR = " for a user's run"


def pause_note(where: str) -> str:
    """The note a paused demo keeps while it waits (``where``: "at step 12")."""
    return f"paused {where}{_PAUSED_FOR}; resumes after it, from where it was"


def paused_where(note: str) -> str:
    """Where a :func:`pause_note` says its run paused ("at step 12"); "" for any
    other note."""
    if not note.startswith("paused ") or _PAUSED_FOR not in note:
        return ""
    return note.removeprefix("paused ").split(_PAUSED_FOR, 1)[0]


def where_stopped(run: Run, last_step: int) -> str:
    """Where a stopped run stands: "at step 12", "in its warm start (40 of 300)"."""
    warm = run.warmup if isinstance(run.warmup, dict) else {}
    if last_step:
        return f"at step {last_step}"
    if warm.get("of"):
        return f"in its warm start ({warm.get('done')} of {warm.get('of')})"
    return "before step 1"


def pause(claim: Claim, last_step: int) -> bool:
    """A demo run yields to a user's run (the embedded executor): this attempt ends
    ``paused``, the run is queued again and resumes when its turn comes, from the
    state the trainer kept at the stop (``execution.resume_kwargs``; else its last
    checkpoint). A pause is not a failure: it does not count toward
    ``RUN_MAX_ATTEMPTS``. False when the lease was not ours."""
    now = timezone.now()
    with transaction.atomic():
        run = held_by(claim).select_for_update().first()
        if run is None:
            return False
        note = pause_note(where_stopped(run, last_step))
        end_attempt(run.id, run.attempt, PAUSED, note, now=now)
        run.status, run.lease, run.enqueued_at = RunStatus.QUEUED, None, now
        run.error, run.last_step = note, last_step
        run.save(update_fields=["status", "lease", "enqueued_at", "error", "last_step"])
        enqueue_on_commit(run)
        frames.send_on_commit(run.id)
    return True


# A paused run that did not stop within the grace period: its state at the stop
# was not kept.
CUT_SHORT = (
    " (it did not stop within the grace period: it goes on from its last checkpoint)"
)


def held_note(where: str, cut: str = "") -> str:
    """What a run its owner paused says while it waits."""
    return f"Paused by its owner {where}{cut}; Resume queues it again from there."


def hold(claim: Claim, last_step: int | None = None, cut: str = "") -> str | None:
    """Its owner paused the run (``pausing.do_pause_run``) and the trainer stopped: this
    attempt ends ``paused`` and the run waits, ``paused``, out of the queue, until
    Resume queues it again (``pausing.do_resume_run``); it then goes on from the state
    kept at the stop (``save_on_stop``), else its last checkpoint. Not a failure: it
    does not count toward ``RUN_MAX_ATTEMPTS``. ``last_step`` None: the last step
    the run recorded; ``cut``: :data:`CUT_SHORT` for a stop past the grace period.
    Returns the status it left (``cancelled`` when a cancel came since the pause was
    heard), None when the lease was not ours."""
    now = timezone.now()
    with transaction.atomic():
        run = held_by(claim).select_for_update().first()
        if run is None:
            return None
        step = run.last_step if last_step is None else last_step
        if run.cancel_requested:  # cancelled since the pause was asked: it ends
            run.status, run.finished_at, run.error = RunStatus.CANCELLED, now, ""
            outcome = RunStatus.CANCELLED
        else:
            run.status, run.error = (
                RunStatus.PAUSED,
                held_note(where_stopped(run, step), cut),
            )
            outcome = PAUSED
        end_attempt(run.id, run.attempt, outcome, run.error, now=now)
        run.lease, run.pause_requested, run.last_step = None, False, step
        fields = ["status", "finished_at", "error", "lease", "pause_requested"]
        run.save(update_fields=[*fields, "last_step"])
        frames.send_on_commit(run.id)
    return run.status


def _take_back(
    run: Run, note: str, now: datetime, last_status: str, *, enqueue: bool
) -> bool:
    """A running run whose attempt ended (``note`` says how): queued again while
    attempts remain (True), else ``last_status``; cancelled if that was asked,
    paused if that was (from its last checkpoint: the state at the stop was not
    kept)."""
    run.lease = None
    requeued = False
    if run.cancel_requested:
        run.status, run.finished_at = RunStatus.CANCELLED, now
        run.error = ""
    elif run.pause_requested:
        run.status, run.pause_requested = RunStatus.PAUSED, False
        run.error = held_note(where_stopped(run, run.last_step), CUT_SHORT)
    elif _counted_attempts(run) >= settings.RUN_MAX_ATTEMPTS:
        run.status, run.finished_at = last_status, now
        run.error = f"{note} (attempt {run.attempt} of {run.attempt})"
    else:
        run.status, run.enqueued_at = RunStatus.QUEUED, now
        run.error = f"attempt {run.attempt}: {note}; trying again"
        if enqueue:
            enqueue_on_commit(run)
        requeued = True
    fields = ["status", "lease", "error", "finished_at", "enqueued_at"]
    run.save(update_fields=[*fields, "pause_requested"])
    frames.send_on_commit(run.id)
    log.warning("run %s: attempt %s: %s -> %s", run.id, run.attempt, note, run.status)
    return requeued


def _counted_attempts(run: Run) -> int:
    """Attempts that count toward RUN_MAX_ATTEMPTS: pauses (a demo's, an owner's) do
    not."""
    return run.attempt - RunAttempt.objects.filter(run=run, outcome=PAUSED).count()


def _resend_unclaimed(now: datetime) -> list[uuid.UUID]:
    """Send queued runs again when nobody claimed them for a long time: a broker
    without persistence loses messages on restart, and a send can fail outright.
    Duplicates are harmless (the claim turns them away)."""
    cutoff = now - timedelta(seconds=settings.RUN_RESEND_QUEUED_SECONDS)
    stale = Run.objects.select_for_update(skip_locked=True).filter(
        status=RunStatus.QUEUED, enqueued_at__lt=cutoff, external=False
    )
    resent = []
    for run in stale:
        run.enqueued_at = now
        run.save(update_fields=["enqueued_at"])
        enqueue_on_commit(run)
        resent.append(run.id)
    return resent


def send_unsent(limit: int = 100) -> list[uuid.UUID]:
    """Send the queued runs whose task message never reached the broker (the send
    failed: ``enqueued_at`` is None), oldest first. The first refusal ends the pass:
    the broker is still away, and the next pass tries again."""
    unsent = (
        Run.objects.filter(
            status=RunStatus.QUEUED, enqueued_at__isnull=True, external=False
        )
        .order_by("created_at")
        .values_list("id", "queue")[:limit]
    )
    sent = []
    for run_id, queue in unsent:
        if not enqueue(run_id, queue):
            break
        Run.objects.filter(pk=run_id, enqueued_at__isnull=True).update(
            enqueued_at=timezone.now()
        )
        sent.append(run_id)
    return sent
