"""External runs: runs trained elsewhere (our trainer on another machine, TRL, verl, an
import) that report their events over the HTTP API.

``check_*`` validates and raises :class:`~dashboard.runs.services.ServiceError`; ``do_*``
mutates. Events go through the same write path as the worker's sink
(:func:`dashboard.ingest.writer.store`: first-write-wins inserts, rollups, frames after the commit),
so the run page, the trajectory browser and compare cannot tell an external run from
ours. The hacking detectors run here, as events arrive (:mod:`dashboard.ingest.detection`).

A batch is all or nothing: every line is parsed and checked against the event schema
(:mod:`trainer.event_schema`) before anything is written, and a bad line refuses the
batch with its line number and field. Re-sending events is harmless: rows are keyed
(run, step, group, index...) and the first write wins. Events whose rows all existed
already are counted as ``duplicates``; a re-sent event that differs from what is stored
is a conflict: the stored row is kept, the event counted in ``conflicts`` and the first
differences described in ``conflicting`` (:mod:`dashboard.ingest.conflicts`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from dashboard import jsonsafe
from dashboard.errors import Forbidden
from dashboard.ingest import writer
from dashboard.ingest.conflicts import Outcome
from dashboard.ingest.detection import detect_external, late_evidence
from dashboard.ingest.fields import last_step_after
from dashboard.live import frames
from dashboard.models import (
    Alert,
    Checkpoint,
    CriticalPath,
    Judgement,
    Run,
    RunStatus,
    Trajectory,
)
from dashboard.runs.event_body import (  # noqa: F401  (re-exported)
    MAX_ERRORS,
    PayloadTooLarge,
    decode_body,
    parse_events,
)
from dashboard.runs.services import (
    Conflict,
    InvalidConfig,
    check_name,
    check_text,
)
from trainer.recording_policy import DEFAULT, RecordConfig, policy_from

FINISH_STATUSES = ("succeeded", "failed", "cancelled")


# --- runs ---------------------------------------------------------------------------
def check_framework(value: Any) -> str:
    if value is None:
        return "external"
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= 64:
        raise InvalidConfig("framework: must be a string of 1 to 64 characters")
    return check_text("framework", value.strip())


def check_external_config(config: Any) -> dict[str, Any]:
    """Any JSON object, bounded like ours (shown and diffed, never executed)."""
    from dashboard.runs.services import check_shape

    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InvalidConfig("config: must be a JSON object")
    check_shape(config)
    if "record" in config:
        try:
            policy_from(config["record"])
        except ValueError as exc:
            raise InvalidConfig(f"config.{exc}") from None
    return jsonsafe.clean(config)


# Frameworks whose trainer applies the recording policy itself (trainer.recording_policy).
SELF_RECORDING = frozenset({"agentic-rl"})


def recording_of(run: Run) -> tuple[RecordConfig | None, int]:
    """The recording policy the server applies to the run's events (None: its
    trainer applied it), and the seed of its sample: the config's ``record`` and
    ``seed`` keys, else the default policy and 0."""
    if run.framework in SELF_RECORDING:
        return None, 0
    config = run.config if isinstance(run.config, dict) else {}
    seed = config.get("seed")
    try:
        policy = policy_from(config.get("record"))
    except ValueError:  # refused at creation; an old row falls back to the default
        policy = DEFAULT
    return policy, seed if type(seed) is int else 0


def check_external_run_limit(user: Any) -> None:
    """At most ``EXTERNAL_RUNS_MAX_PER_USER`` external runs a user (those deleted
    do not count). Call inside a transaction: the user row is locked so creations
    serialise."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    count = Run.objects.filter(owner=user, external=True).count()
    if count >= settings.EXTERNAL_RUNS_MAX_PER_USER:
        raise Conflict(
            f"EXTERNAL_RUNS_MAX_PER_USER: this user has {count:,} external runs, the "
            f"limit of {settings.EXTERNAL_RUNS_MAX_PER_USER:,} a user; delete some "
            "to create more"
        )


def do_create_external_run(
    user: Any, *, name: Any, framework: Any = None, config: Any = None
) -> Run:
    name = check_name(name) or "external run"
    framework = check_framework(framework)
    config = check_external_config(config)
    now = timezone.now()
    with transaction.atomic():
        check_external_run_limit(user)
        return Run.objects.create(
            owner=user,
            name=name,
            config=config,
            external=True,
            framework=framework,
            queue="",
            status=RunStatus.RUNNING,
            started_at=now,
            heartbeat_at=now,
        )


def check_external(run: Run) -> Run:
    if not run.external:
        raise Conflict("run: only external runs take events over HTTP")
    return run


# --- storing a batch ----------------------------------------------------------------
def _existing(run_id: Any, events: list[dict[str, Any]]) -> set[tuple]:
    """The keys of rows these events (other than steps: their metric points say it
    as they are written, see ``writer.insert_metrics``) would write that are already
    stored."""
    steps: dict[str, set[int]] = {}
    for ev in events:
        steps.setdefault(ev["type"], set()).add(ev.get("step", 0))
    found: set[tuple] = set()
    for kind, model, fields in _KEYED:
        if steps.get(kind):
            rows = model.objects.filter(run_id=run_id, step__in=steps[kind])
            found.update((kind, *r) for r in rows.values_list("step", *fields))
    return found


_KEYED = (
    ("trajectory", Trajectory, ("group", "index")),
    ("judgement", Judgement, ("group", "index", "judge")),
    ("critical_path", CriticalPath, ("group", "index")),
    ("alert", Alert, ("detector",)),
    ("checkpoint", Checkpoint, ()),
)
_FIELDS = {kind: fields for kind, _, fields in _KEYED}


def _ident(ev: dict[str, Any]) -> tuple:
    kind = ev["type"]
    if kind == "step":
        return (kind, ev["step"])
    return (kind, ev.get("step", 0), *(ev.get(f) for f in _FIELDS.get(kind, ())))


def _refuse_if_new(
    run: Run,
    events: list[dict[str, Any]],
    flagged: set[int],
    found: set[tuple],
    outcome: Outcome,
) -> None:
    """A finished run takes a batch that stores nothing new (a client's retry of what
    it sent before it finished); anything new is a 409 (rolled back) until the run
    is reopened."""
    for i, ev in enumerate(events):
        if ev["type"] == "run_started" or i in flagged:
            continue
        if not _is_duplicate(ev, found, outcome, run.status):
            raise Conflict(
                f"run: finished as {run.status}; it takes no more events "
                f"(line {i + 1}: a new {ev['type']}) unless reopened: "
                f"POST /api/runs/{run.pk}/reopen"
            )


def _conflicted(events: list[dict[str, Any]], outcome: Outcome) -> set[int]:
    """The positions of the events counted as conflicts: of the events with a
    conflicting key, the last one (an earlier one in the batch was the first write)."""
    left, out = set(outcome.conflicting), set()
    for i in range(len(events) - 1, -1, -1):
        ident = _ident(events[i])
        if ident in left:
            left.discard(ident)
            out.add(i)
    return out


def _is_duplicate(
    ev: dict[str, Any], found: set[tuple], outcome: Outcome, status: str
) -> bool:
    kind = ev["type"]
    if kind == "step":
        return ev["step"] in outcome.stale_steps or not ev["metrics"]
    if kind in _FIELDS:
        return (kind, ev["step"], *(ev.get(f) for f in _FIELDS[kind])) in found
    if kind == "run_finished":
        return status == ev["status"]
    return False


def do_ingest_events(run: Run, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Store a checked batch; returns ``{"accepted", "duplicates", "conflicts",
    "conflicting", "cancel_requested"}`` (each event counted once: a conflict if
    anything of it differed from what was stored, else a duplicate if nothing of it
    was new, else accepted).

    The run's heartbeat is its last event: a lost run comes back to ``running``. A
    ``run_finished`` event finishes the run like :func:`do_finish_external_run`.
    """
    check_external(run)
    finished = [ev for ev in events if ev["type"] == "run_finished"]
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        found = _existing(run.pk, events)
        status_before = run.status
        record, seed = recording_of(run)
        # Detected before storing, stored with the batch: the recording policy keeps
        # the groups an alert points at (dashboard.ingest.detection).
        alerted = late_evidence(run, events)
        alerts = detect_external(run, events)
        outcome = Outcome()
        _, parts = writer.store(
            run.pk,
            [*events, *alerts],
            supersede_on_start=False,
            record=record,
            seed=seed,
            alerted=alerted,
            outcome=outcome,
        )
        flagged = _conflicted(events, outcome)
        if status_before in FINISH_STATUSES:
            _refuse_if_new(run, events, flagged, found, outcome)
        conflicted = len(flagged)
        duplicates = sum(
            i not in flagged and _is_duplicate(ev, found, outcome, status_before)
            for i, ev in enumerate(events)
        )
        fields = {"heartbeat_at": timezone.now()}
        last_step = last_step_after(
            (e for e in events if e["type"] == "step"), run.last_step
        )
        if last_step > run.last_step:
            fields["last_step"] = last_step
        if run.status == RunStatus.LOST:
            fields["status"] = RunStatus.RUNNING
        if finished:
            fields.update(
                _finish_fields(finished[-1]["status"], finished[-1].get("error"))
            )
        Run.objects.filter(pk=run.pk).update(**fields)
        for name, value in fields.items():
            setattr(run, name, value)
        parts.status = run.status
        parts.last_step = run.last_step
        if duplicates + conflicted < len(events) or "status" in fields:
            transaction.on_commit(lambda: frames.send(run.pk, parts))
    return {
        "accepted": len(events) - duplicates - conflicted,
        "duplicates": duplicates,
        "conflicts": conflicted,
        "conflicting": outcome.shown,
        "cancel_requested": run.cancel_requested,
    }


def _finish_fields(status: str, error: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"status": status, "finished_at": timezone.now()}
    if error:
        fields["error"] = jsonsafe.text(error)[-20000:]  # an event's: repaired
    return fields


def check_finish(status: Any, error: Any) -> tuple[str, str | None]:
    if status not in FINISH_STATUSES:
        raise InvalidConfig(f"status: must be one of {', '.join(FINISH_STATUSES)}")
    if error is not None and not isinstance(error, str):
        raise InvalidConfig("error: must be a string or null")
    return status, None if error is None else check_text("error", error)


def do_finish_external_run(run: Run, status: Any, error: Any = None) -> Run:
    check_external(run)
    status, error = check_finish(status, error)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status in FINISH_STATUSES:
            if locked.status == status:  # the same finish again: nothing changes
                return locked
            raise Conflict(
                f"status: run already finished as {locked.status}; "
                "a second finish cannot change it"
            )
        fields = _finish_fields(status, error)
        Run.objects.filter(pk=run.pk).update(**fields)
        frames.send_on_commit(run.pk)
    run.refresh_from_db()
    return run


def do_reopen_external_run(run: Run, user: Any) -> Run:
    """A finished external run back to ``running``, to take events again (a trainer
    resuming it). Only its owner may; a running or lost run is answered unchanged."""
    check_external(run)
    if run.owner_id != getattr(user, "pk", None):
        raise Forbidden("run: only its owner can reopen it")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status in FINISH_STATUSES:
            Run.objects.filter(pk=run.pk).update(
                status=RunStatus.RUNNING, finished_at=None, heartbeat_at=timezone.now()
            )
            frames.send_on_commit(run.pk)
    run.refresh_from_db()
    return run


def mark_lost(now: Any = None) -> list[Any]:
    """External runs silent for ``EXTERNAL_RUN_TIMEOUT`` become ``lost`` (returns ids)."""
    from datetime import timedelta

    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.EXTERNAL_RUN_TIMEOUT)
    with transaction.atomic():
        ids = list(
            Run.objects.filter(
                external=True, status=RunStatus.RUNNING, heartbeat_at__lt=cutoff
            ).values_list("pk", flat=True)
        )
        if ids:
            Run.objects.filter(pk__in=ids, status=RunStatus.RUNNING).update(
                status=RunStatus.LOST
            )
            for run_id in ids:
                frames.send_on_commit(run_id)
    return ids
