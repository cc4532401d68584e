"""Why a queued run waits: its place in line and what it waits for.

Embedded mode (one in-process executor): runs execute one at a time, a user's own
runs before demo runs (``Run.demo``), each kind in submission order
(:func:`line_order`, which :mod:`dashboard.runs.inprocess` follows); a demo in
progress pauses at its next step for a user's run. Production: a run waits in its
Celery queue for a worker serving it; the runs ahead are those queued or running
on the same queue (Celery keeps no order we can read, so submission order stands
in for it), and no live worker serving the queue is said plainly.
"""

from __future__ import annotations

from typing import Any, TypedDict

from django.conf import settings
from django.db.models import Q

from dashboard.models import Run, RunStatus
from dashboard.runs.lease import paused_where

AHEAD_SHOWN = 3


class Ahead(TypedDict):
    id: str
    name: str
    status: str
    demo: bool
    last_step: int
    steps: int | None
    warmup: dict[str, Any]


class Waiting(TypedDict):
    position: int  # 1: next to start
    ahead: list[Ahead]  # the nearest AHEAD_SHOWN runs before it, running first
    queue: str
    workers: int | None  # live workers serving the queue (None: embedded)
    text: str


def line_order() -> tuple[str, ...]:
    """The order queued runs start in on the embedded executor."""
    return ("demo", "created_at")


def _ahead_filter(run: Run) -> Q:
    """Queued runs that start before ``run`` by :func:`line_order`."""
    if settings.RUN_EXECUTOR == "inprocess":
        if run.demo:
            return Q(demo=False) | Q(demo=True, created_at__lt=run.created_at)
        return Q(demo=False, created_at__lt=run.created_at)
    return Q(queue=run.queue, created_at__lt=run.created_at)


def waiting(run: Run) -> Waiting | None:
    """Where a queued run of ours stands; None for any other run."""
    if run.status != RunStatus.QUEUED or run.external:
        return None
    inprocess = settings.RUN_EXECUTOR == "inprocess"
    ours = Run.objects.filter(external=False).exclude(pk=run.pk)
    running = ours.filter(status=RunStatus.RUNNING)
    if not inprocess:
        running = running.filter(queue=run.queue)
    queued = ours.filter(_ahead_filter(run), status=RunStatus.QUEUED)
    ahead_rows = list(running.order_by("started_at")[:AHEAD_SHOWN]) + list(
        queued.order_by(*line_order())[:AHEAD_SHOWN]
    )
    position = running.count() + queued.count() + 1
    workers = None if inprocess else _workers_serving(run.queue)
    ahead = [_ahead(r) for r in ahead_rows[:AHEAD_SHOWN]]
    return {
        "position": position,
        "ahead": ahead,
        "queue": run.queue,
        "workers": workers,
        "text": _text(run, position, ahead, workers, running.count()),
    }


def _ahead(r: Run) -> Ahead:
    steps = r.config.get("steps") if isinstance(r.config, dict) else None
    return {
        "id": str(r.pk),
        "name": r.name,
        "status": r.status,
        "demo": r.demo,
        "last_step": r.last_step,
        "steps": steps if isinstance(steps, int) else None,
        "warmup": r.warmup or {},
    }


def _workers_serving(queue: str) -> int:
    from dashboard.runs.workers import live_offers

    return sum(queue in offer.queues for offer in live_offers())


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10)
    return f"{n}{suffix or 'th'}"


def where(r: Ahead) -> str:
    """How far a run ahead is: its step, or its warm start."""
    if r["status"] != RunStatus.RUNNING:
        return "queued"
    warm = r["warmup"]
    if not r["last_step"] and warm.get("of"):
        return f"warm start {warm.get('done', 0)} of {warm['of']}"
    of = f" of {r['steps']}" if r["steps"] else ""
    return f"step {r['last_step']}{of}"


def _text(
    run: Run, position: int, ahead: list[Ahead], workers: int | None, running: int
) -> str:
    """One sentence for the run page and the runs list: with a run training ahead,
    "next to start: 'X' trains now (step 12 of 200)" ("2nd in line, behind 'X'"
    read as if X were queued before it)."""
    if workers == 0:
        return (
            f"waiting for a worker serving queue {run.queue}: none is running "
            "(start one: celery -A dashboard worker -Q "
            f"{run.queue.split('-x')[0]})"
        )
    line = "next in line" if position == 1 else f"{ordinal(position)} in line"
    first = ahead[0] if ahead else None
    if first and first["status"] == RunStatus.RUNNING:
        queued = position - 1 - running
        line = "next to start" if queued <= 0 else f"{ordinal(queued + 1)} to start"
        line += f": {first['name']!r} trains now ({where(first)})"
        if first["demo"] and not run.demo:
            line += ", a demo that pauses for your run at its next step"
        if queued > 0:
            line += f"; {queued} queued ahead"
    elif first:
        line += f", behind {first['name']!r} ({where(first)})"
    if workers is not None:
        line += f"; waiting for a worker serving queue {run.queue}"
    return line


def paused_at(run: Run) -> str:
    """A queued demo that yielded to a user's run (:func:`dashboard.runs.lease.pause`
    queued it again with a note): where it paused, for the runs list, where "queued"
    alone read as never started (the run page shows the note itself)."""
    where = paused_where(run.error or "")
    if not (run.demo and run.status == RunStatus.QUEUED and where):
        return ""
    return f"paused {where} for a user's run, resumes from there"
