"""One rank of a run of several processes, started by torchrun for the worker that
holds the run's lease (``dashboard.runs.multiprocess``)::

    python -m dashboard.runs.rank RUN_ID ATTEMPT --checkpoint-dir DIR --reports DIR

Every rank sets Django up, reads the claim back (``lease.claim_of``: the run's config
and lease token, as long as that attempt holds the run), joins the process group
(``trainer.distributed.start``, from torchrun's environment) and trains its share.
Rank 0 owns the ``RunSink`` (batched writes fenced on the lease, heartbeats, frames)
and answers ``should_stop`` for all (a cancel, a lost lease); the other ranks' records
reach it through the trainer's gathers. Each rank writes how it ended to its report
file; a SIGTERM (torchrun stopping the group because another rank ended) is reported
as ``terminated``, so that only a rank that died without a word has no report.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any


class Terminated(BaseException):
    """SIGTERM; a BaseException, so no ``except Exception`` on the way (a reward
    function's, the trainer's) mistakes it for a failure of its own."""


# Set by the first SIGTERM and never cleared: this rank was asked to stop.
_stop_asked = threading.Event()


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough
    _stop_asked.set()
    raise Terminated


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with_parent(poll_s: float = 1.0) -> threading.Thread:
    """End this process once its parent, torchrun, is gone (``dashboard.runs.torchrun``
    asks the same of torchrun for its worker).

    torchrun stops its ranks with SIGTERM and, 30 s later, SIGKILL; a worker that
    kills torchrun sooner (its cancel grace, or ranks that reported but do not
    exit) would leave behind a rank that SIGTERM does not reach: one blocked in
    native code, whose handler cannot run, or hung holding the interpreter lock.
    On Linux the kernel sends this process SIGKILL when its parent dies
    (``PR_SET_PDEATHSIG``), whatever it is doing; elsewhere, and as a second
    line, a daemon thread sees the rank re-parented and calls ``os._exit``.
    torchrun put each rank in a session of its own, so a signal to torchrun's
    group would not reach it."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        except (OSError, AttributeError):  # no prctl: the thread alone
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


_SIGNALLED = ("Terminated", "KeyboardInterrupt")


def stopped_by_signal(exc: BaseException) -> bool:
    """Whether ``exc`` is this rank being stopped (SIGTERM, Ctrl-C), directly or
    gathered by a collective: torch's distributed checkpoint catches every rank's
    ``BaseException`` during a save and raises a ``CheckpointException`` (itself a
    ``BaseException``) holding each rank's ``(exception, traceback)``. Matched by
    class name, as the ranks' ``Terminated`` travels pickled between processes.

    Whatever a rank raises once its SIGTERM came is the stop too: the checkpoint's
    write phase catches the ``Terminated`` to gather it, and its gather then fails
    with gloo's "Connection closed by peer" when the other rank, stopped outside
    a save, has already exited (seen in CI: a stop read as a failure)."""
    if _stop_asked.is_set() or isinstance(exc, (Terminated, KeyboardInterrupt)):
        return True
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict):
        return False
    return any(
        type(pair[0] if isinstance(pair, tuple) else pair).__name__ in _SIGNALLED
        for pair in failures.values()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard.runs.rank")
    parser.add_argument("run_id")
    parser.add_argument("attempt", type=int)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--reports", required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    signal.signal(signal.SIGTERM, _on_sigterm)
    exit_with_parent()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from dashboard.runs.multiprocess import ENDED_WELL, Report, write_report

    written: list = []

    def report_once(report: Report) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the report is what counts
        write_report(args.reports, report)
        written.append(report)

    try:
        report = train_rank(args, rank, report_once)
    except BaseException as exc:  # outside the training (its set-up, its clean-up)
        if written:  # the clean-up after the report failed: the report stands
            report = written[0]
        elif isinstance(exc, SystemExit) or not stopped_by_signal(exc):
            raise
        else:  # Ctrl-C reaches a terminal's ranks too
            report = Report(rank, "terminated", "stopped by torchrun", at=time.time())
    if not written:
        report_once(report)
    return 0 if report.status in ENDED_WELL else 1


def train_rank(
    args: argparse.Namespace,
    rank: int,
    reported: Callable[[Any], None] = lambda report: None,
):
    """Train this rank's share of the claimed attempt; its ``Report``, also handed
    to ``reported`` before the process group is taken down: that teardown can
    hang (PyTorch #56297), and once every rank has reported the worker ends the
    attempt whether or not torchrun exits (``multiprocess.EXIT_GRACE_S``)."""
    from django.conf import settings
    from django.db import connection
    from django.utils.module_loading import import_string

    from dashboard.models import RunStatus
    from dashboard.runs import lease
    from dashboard.runs.execution import (
        failure_message,
        init_kwargs,
        judge_endpoints,
        one_line,
        takes_save_on_stop,
    )
    from dashboard.runs.multiprocess import Report
    from dashboard.runs.sinks import RunSink
    from trainer.config import TrainConfig
    from trainer.distributed import start
    from trainer.events import NullSink

    claim = lease.claim_of(args.run_id, args.attempt)
    if claim is None:
        return Report(rank, "lost", "this attempt no longer holds the run")
    sink = parallel = None
    detail = ""
    try:
        try:
            config = TrainConfig.model_validate(claim.config)
            parallel = start(config.model.device, config.resources.strategy)
            if parallel.main:
                sink = RunSink(
                    claim,
                    interval_s=settings.RUN_FRAME_INTERVAL_MS / 1000,
                    heartbeat_s=settings.RUN_HEARTBEAT_SECONDS,
                )
            runner = import_string(settings.RUN_TRAINER)
            result = runner(
                config,
                sink or NullSink(),
                should_stop=(
                    (lambda: sink.lost or lease.stop_asked(claim)) if sink else None
                ),
                checkpoint_dir=args.checkpoint_dir,
                resume=True,
                endpoints=judge_endpoints(),
                parallel=parallel,
                **init_kwargs(config),
                # Its owner's pause keeps the state at the stop (rank 0 asks; the
                # trainer broadcasts the answer).
                **(
                    {
                        "save_on_stop": (lambda: lease.pause_asked(claim))
                        if sink
                        else None
                    }
                    if takes_save_on_stop(runner)
                    else {}
                ),
            )
            status = result.status if result.status in RunStatus.values else "failed"
            message = one_line(getattr(result, "error", None) or "")
        except BaseException as exc:  # dcp's CheckpointException is a BaseException
            if isinstance(exc, (SystemExit, GeneratorExit)):
                raise
            if stopped_by_signal(exc):
                status, message = "terminated", "stopped by torchrun"
            else:
                status, message = "failed", failure_message(exc)
                detail = traceback.format_exc()
        finally:
            at = time.time()  # before the sink's last flush: the failures' order
            if sink is not None:
                sink.close()
        if sink is not None and sink.lost:
            report = Report(rank, "lost", "the lease was lost", at=at)
        else:
            last_step = sink.last_step if sink is not None else None
            report = Report(rank, status, message, detail, last_step, at)
        reported(report)  # before the teardown below, which can hang
        return report
    finally:
        if parallel is not None:
            parallel.close()
        connection.close()


if __name__ == "__main__":
    sys.exit(main())
