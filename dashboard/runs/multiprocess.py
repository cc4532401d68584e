"""A run of several processes on a worker: torchrun starts the ranks, the worker waits.

The worker that claimed the run (``dashboard.runs.execution``) starts torchrun
(``python -m dashboard.runs.torchrun --standalone --nproc-per-node N -m
dashboard.runs.rank RUN ATTEMPT``: torchrun that dies with the worker, as the ranks
die with torchrun), as the trainer CLI does, and heartbeats the lease while the group
lives (the ranks take a while to start). Each rank sets Django up and joins the
process group; rank 0 owns the run's sink (and so its heartbeat too) and polls for a
cancel, the others' records reach it through ``trainer.distributed``. Nothing else
passes between them.

Each rank says how it ended in a small report file (``write_report``); the worker
reads them when torchrun is done and turns them into the attempt's ending
(:func:`ending`); once every rank has reported, torchrun gets ``EXIT_GRACE_S`` to
exit before it is stopped (a rank hung in its clean-up changes no ending). A rank
with no report died without a word (SIGKILL, the out-of-memory killer, a
segfault): torchrun tore the group down, the run is fine, the attempt is requeued
and resumes from its last checkpoint. A rank that raised makes the
run fail with its message (the earliest one: the others' errors follow from it).

This module knows the lease and the files, not the trainer.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from dashboard.runs import lease
from dashboard.runs.lease import Claim

log = logging.getLogger(__name__)
# How a rank ended: a trainer's result, or "failed" (it raised), "terminated"
# (torchrun stopped it because another rank ended), "lost" (the lease was gone).
ENDED_WELL = ("succeeded", "cancelled")
# Seconds torchrun may run on once every rank has written its report.
EXIT_GRACE_S = 60.0


@dataclass(frozen=True)
class Report:
    """One rank's last word, written as ``rank-NNNNN.json``."""

    rank: int
    status: str
    message: str = ""
    detail: str = ""
    last_step: int | None = None
    at: float = 0.0


@dataclass(frozen=True)
class Ending:
    """What the worker records for the attempt. ``kind``: ``finished`` (the run's
    ``status``), ``requeue`` (a rank died; try again), ``interrupted`` (this process
    is stopping) or ``lease-lost``."""

    kind: str
    status: str = ""
    message: str = ""
    detail: str = ""
    last_step: int | None = None


def reports_dir(run_id: Any, attempt: int) -> Path:
    return Path(settings.RUNS_DIR) / str(run_id) / "ranks" / f"attempt-{attempt}"


def write_report(directory: str | os.PathLike[str], report: Report) -> None:
    path = Path(directory) / f"rank-{report.rank:05d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(report)), encoding="utf-8")
    os.replace(tmp, path)


def read_reports(directory: str | os.PathLike[str]) -> dict[int, Report]:
    out: dict[int, Report] = {}
    for path in sorted(Path(directory).glob("rank-*.json")):
        try:
            report = Report(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue  # half a file is no word at all
        out[report.rank] = report
    return out


def ending(reports: dict[int, Report], processes: int, returncode: int) -> Ending:
    """The attempt's ending from the ranks' reports (and torchrun's exit status)."""
    silent = [r for r in range(processes) if r not in reports]
    if silent:
        who = "rank " + ", ".join(str(r) for r in silent)
        if len(silent) == processes:
            message = (
                f"no training process reported (torchrun exited with {returncode})"
            )
        else:
            message = f"{who} died without a word (killed, or out of memory)"
        return Ending("requeue", message=message)
    failed = sorted(
        (r for r in reports.values() if r.status == "failed"), key=lambda r: r.at
    )
    if failed:
        first = failed[0]
        return Ending(
            "finished",
            "failed",
            message=first.message,
            detail=first.detail,
            last_step=reports[0].last_step,
        )
    if any(r.status not in ENDED_WELL for r in reports.values()):
        # Stopped from outside (torchrun was told to stop), or the lease was gone.
        stopped = sorted(r.rank for r in reports.values() if r.status not in ENDED_WELL)
        return Ending("requeue", message=f"rank {stopped[0]} was stopped")
    main = reports[0]
    return Ending("finished", main.status, main.message, last_step=main.last_step)


# torchrun, ending with the worker's thread that starts it (dashboard.runs.torchrun).
TORCHRUN = (sys.executable, "-m", "dashboard.runs.torchrun")


def command(run_id: Any, attempt: int, processes: int, root: Path, reports: Path):
    """torchrun with the rank module, on this machine (``--standalone`` picks a free
    rendezvous port)."""
    return [
        *TORCHRUN,
        "--standalone",
        f"--nproc-per-node={processes}",
        "--module",
        "dashboard.runs.rank",
        str(run_id),
        str(attempt),
        "--checkpoint-dir",
        str(root),
        "--reports",
        str(reports),
    ]


def train(
    claim: Claim,
    processes: int,
    root: Path,
    *,
    interrupted: Callable[[], bool] = lambda: False,
) -> Ending:
    """Start the ranks, hold the lease until they are done, return the ending."""
    reports = reports_dir(claim.run_id, claim.attempt)
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir(parents=True)
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    here = str(settings.BASE_DIR)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, env.get("PYTHONPATH", "")) if p
    )
    cmd = command(claim.run_id, claim.attempt, processes, root, reports)
    log.info("run %s attempt %s: %s", claim.run_id, claim.attempt, " ".join(cmd))
    proc = subprocess.Popen(cmd, env=env)
    cancelled_at = reported_at = None
    while True:
        try:
            returncode = proc.wait(timeout=settings.RUN_HEARTBEAT_SECONDS)
            break
        except subprocess.TimeoutExpired:
            pass
        if reported_at is None and len(read_reports(reports)) == processes:
            reported_at = time.monotonic()
        if reported_at and time.monotonic() - reported_at > EXIT_GRACE_S:
            # Every rank said how it ended, and one has not exited: hung in its
            # clean-up (a process group's teardown can deadlock), nothing lost.
            log.warning(
                "run %s: every rank reported but torchrun is still running after "
                "%g s; stopping it",
                claim.run_id,
                EXIT_GRACE_S,
            )
            _stop(proc, grace_s=5.0)
            return ending(read_reports(reports), processes, -1)
        if interrupted():
            _stop(proc)
            return Ending("interrupted")
        if not _heartbeat(claim):
            log.warning("run %s: lease lost; stopping its ranks", claim.run_id)
            _stop(proc)
            return Ending("lease-lost")
        cancelled_at = cancelled_at or (
            time.monotonic() if lease.stop_asked(claim) else None
        )
        if cancelled_at and time.monotonic() - cancelled_at > grace_s(claim):
            # Rank 0 stops at its next step; a step that never ends is cut short.
            log.warning(
                "run %s: not stopped after the cancel; stopping its ranks", claim.run_id
            )
            _stop(proc, grace_s=5.0)
            return Ending(
                "finished",
                "cancelled",
                f"did not stop within {grace_s():g} s of the cancel; its "
                "processes were terminated",
            )
    if returncode != 0 and interrupted():  # Ctrl-C reached the ranks first
        return Ending("interrupted")
    return ending(read_reports(reports), processes, returncode)


def grace_s(claim: Claim | None = None) -> float:
    """How long the ranks may take to stop: a cancel's grace, or a pause's (longer:
    they check only between steps, and keep the state at the next)."""
    cancel = float(settings.RUN_CANCEL_GRACE_SECONDS)
    if claim is not None and lease.pause_asked(claim):
        return max(cancel, float(settings.RUN_PAUSE_GRACE_SECONDS))
    return cancel


def _heartbeat(claim: Claim) -> bool:
    try:
        return lease.heartbeat(claim)
    except (OperationalError, InterfaceError) as exc:
        log.warning("run %s: heartbeat failed: %r", claim.run_id, exc)
        connection.close()
        return True  # a database blip is not a lost lease; the reaper decides


def _stop(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """SIGTERM to torchrun, which stops its ranks (SIGTERM, then SIGKILL)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
