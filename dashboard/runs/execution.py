"""Executing one claimed run: config -> trainer -> sink -> final status.

The same code path (:func:`execute`) serves Celery workers (``dashboard.runs.jobs``) and
the embedded in-process executor (``dashboard.runs.inprocess``). Torch and the trainer are
imported here, inside the task, never at module import of the web process or the
Celery parent (CUDA must be initialised only in the prefork child). A run of several
processes is trained by ranks that torchrun starts (:func:`run_claimed_ranks`,
``dashboard.runs.multiprocess``); this process keeps the lease and records the outcome.
"""

from __future__ import annotations

import inspect
import logging
import re
import shutil
import threading
import traceback
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from dashboard.models import Checkpoint, JudgeEndpoint, Run, RunStatus
from dashboard.runs import devices, lease, multiprocess, stopping
from dashboard.runs.lease import Claim
from dashboard.runs.sinks import RunSink

log = logging.getLogger(__name__)
# Set when this process is shutting down (``manage.py serve`` after Ctrl-C): the run
# in progress stops at its next step and is left to be resumed, not marked cancelled.
_interrupted = threading.Event()


# Set when a user's run is submitted while a demo run executes here (the embedded
# executor): the demo stops at its next step and goes back to the queue.
_pause = threading.Event()


def pause_demo() -> None:
    """Ask the demo run this process executes to yield (``dashboard.runs.inprocess``)."""
    _pause.set()


def clear_pause() -> None:
    _pause.clear()


def interrupt() -> None:
    """Stop the run this process executes at its next step, resumable from its last
    checkpoint by the next process (``inprocess.recover``)."""
    _interrupted.set()


# A Python source file's path in an exception message (the server's layout).
_SOURCE_PATH = re.compile(r"(?:[A-Za-z]:)?[/\\][^\s'\"]*\.py\b")


def checkpoint_dir(run_id: Any) -> Path:
    return Path(settings.RUNS_DIR) / str(run_id) / "checkpoints"


def checkpoint_kept(run_id: Any, step: int) -> bool:
    """Whether the checkpoint of ``step`` is still on disk (the trainer deletes all
    but the newest ``checkpoint.keep``), found under the run's own directory as the
    model download finds it, never by a row's path."""
    path = checkpoint_dir(run_id) / f"step-{int(step):06d}" / "policy.safetensors"
    return path.is_file()


def newest_checkpoint(run_id: Any) -> Path | None:
    """The newest checkpoint of a run that the database recorded and that is still
    on disk. Found by step under the run's own directory: the paths in checkpoint
    rows are not trusted (an external run reports whatever it likes)."""
    root = checkpoint_dir(run_id)
    steps = (
        Checkpoint.objects.filter(run_id=run_id)
        .order_by("-step")
        .values_list("step", flat=True)
    )
    for step in steps[:100]:
        if checkpoint_kept(run_id, step):
            return root / f"step-{int(step):06d}"
    return None


def takes_save_on_stop(runner: Any) -> bool:
    try:
        return "save_on_stop" in inspect.signature(runner).parameters
    except (TypeError, ValueError):
        return False


def resume_kwargs(
    runner: Any, demo: bool, claim: Claim | None = None
) -> dict[str, Any]:
    """``save_on_stop=``, for a trainer that takes it: a run stopped by a pause (its
    owner's, or a demo yielding to a user's run) or by the server's shutdown resumes
    later, so it keeps its state at the stop (the last finished step, the warm
    start's progress), not only its last scheduled checkpoint; a cancel keeps
    nothing more."""
    if not takes_save_on_stop(runner):
        return {}

    def wanted() -> bool:
        if _interrupted.is_set() or (demo and _pause.is_set()):
            return True
        return claim is not None and lease.pause_asked(claim)

    return {"save_on_stop": wanted}


def init_kwargs(config: Any) -> dict[str, Any]:
    """``init_checkpoint=`` for a run that starts from another run's weights
    (``model.init_from_run``, authorised at submit); nothing otherwise, so trainers
    that do not know the argument keep working."""
    source = config.model.init_from_run
    if not source:
        return {}
    path = newest_checkpoint(source)
    if path is None:
        raise RuntimeError(
            f"model.init_from_run: run {source} has no checkpoint left on disk"
        )
    return {"init_checkpoint": str(path)}


def judge_endpoints() -> dict[str, Any]:
    """The admin allow-list as ``rewards.EndpointSpec`` objects, by name."""
    from rewards import EndpointSpec

    out = {}
    for ep in JudgeEndpoint.objects.filter(enabled=True):
        try:
            out[ep.name] = EndpointSpec(
                name=ep.name, base_url=ep.base_url, api_key=ep.api_key or None
            )
        except ValueError as exc:
            log.warning("judge endpoint %s skipped: %s", ep.name, exc)
    return out


def prune_unrecorded_checkpoints(run_id: Any, root: Path) -> None:
    """Drop checkpoints newer than the newest one the database recorded.

    The trainer writes a checkpoint, then emits its event; a worker killed in between
    leaves a checkpoint whose earlier rows may never have reached the database.
    Resuming from the recorded one replays those steps instead of losing them.
    """
    from trainer.checkpoint import list_checkpoints

    recorded = (
        Checkpoint.objects.filter(run_id=run_id)
        .order_by("-step")
        .values_list("step", flat=True)
        .first()
    )
    for path in list_checkpoints(root):
        step = int(path.name.split("-")[-1])
        if recorded is None or step > recorded:
            log.warning(
                "run %s: discarding unrecorded checkpoint %s", run_id, path.name
            )
            shutil.rmtree(path, ignore_errors=True)


def execute(run_id: Any) -> str:
    """Claim a queued run and train it here; ``skipped`` when it is not ours to run
    (finished, cancelled, or claimed elsewhere: duplicate messages are no-ops)."""
    claim = lease.claim(run_id)
    if claim is None:
        return "skipped"
    return run_claimed(claim)


def one_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of ``text``, at most ``limit`` characters."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def failure_message(exc: BaseException) -> str:
    """What the run's owner reads when an attempt raised: one line, no traceback, no
    server file paths (those go to the log and the admin, on the attempt)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        err = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"])
        return one_line(f"invalid configuration: {loc}: {err['msg']}")
    text = _SOURCE_PATH.sub("<server file>", one_line(str(exc)))
    return one_line(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def requested_processes(config: Any) -> int:
    """``resources.processes`` of a stored config (1 when unreadable: the one-process
    path then reports what is wrong with it)."""
    resources = config.get("resources") if isinstance(config, dict) else None
    processes = resources.get("processes", 1) if isinstance(resources, dict) else 1
    return processes if isinstance(processes, int) else 1


def run_claimed(claim: Claim) -> str:
    """Train the claimed run to the end; record its outcome. Returns the status."""
    from trainer.config import TrainConfig
    from trainer.stopping import Stopped

    if requested_processes(claim.config) > 1:
        return run_claimed_ranks(claim)
    root = checkpoint_dir(claim.run_id)
    sink = RunSink(
        claim,
        interval_s=settings.RUN_FRAME_INTERVAL_MS / 1000,
        heartbeat_s=settings.RUN_HEARTBEAT_SECONDS,
    )
    status, message, detail = RunStatus.FAILED, "", ""
    demo = Run.objects.filter(pk=claim.run_id, demo=True).exists()
    try:
        config = TrainConfig.model_validate(claim.config)
        prune_unrecorded_checkpoints(claim.run_id, root)
        runner = import_string(settings.RUN_TRAINER)
        with stopping.CancelWatch(claim) as watch:
            result = runner(
                config,
                sink,
                should_stop=lambda: (
                    watch.requested.is_set()
                    or sink.lost
                    or _interrupted.is_set()
                    or (demo and _pause.is_set())
                    or lease.stop_asked(claim)
                ),
                checkpoint_dir=str(root),
                resume=True,
                endpoints=judge_endpoints(),
                **init_kwargs(config),
                **resume_kwargs(runner, demo, claim),
            )
        status = (
            result.status if result.status in RunStatus.values else RunStatus.FAILED
        )
        message = one_line(getattr(result, "error", None) or "")
    except Stopped:  # ended by its CancelWatch, which recorded the cancel
        log.warning("run %s: stopped after the cancel's grace period", claim.run_id)
    except Exception as exc:
        message, detail = failure_message(exc), traceback.format_exc()
        log.exception("run %s attempt %s failed", claim.run_id, claim.attempt)
    finally:
        sink.close()
    if sink.lost:
        return "lease-lost"
    if _interrupted.is_set():
        log.warning("run %s: interrupted by shutdown; resumes on restart", claim.run_id)
        lease.end_attempt(
            claim.run_id, claim.attempt, "interrupted", "the server stopped"
        )
        return "interrupted"  # still "running": the next start requeues it
    paused = demo and _pause.is_set() and status == RunStatus.CANCELLED
    if paused and not lease.should_stop(claim):  # not a cancel of its own
        lease.pause(claim, sink.last_step)
        return "paused"
    if status == RunStatus.CANCELLED and lease.pause_asked(claim):
        return str(lease.hold(claim, sink.last_step) or "lease-lost")
    lease.finish(
        claim, status, message=message, detail=detail, last_step=sink.last_step
    )
    return str(status)


def run_claimed_ranks(claim: Claim) -> str:
    """Train the claimed run as ``resources.processes`` ranks under torchrun
    (``dashboard.runs.multiprocess``); record the outcome, or requeue the attempt when a
    rank died without a word."""
    from trainer.config import TrainConfig

    root = checkpoint_dir(claim.run_id)
    try:
        config = TrainConfig.model_validate(claim.config)
        wanted = config.resources.processes
        have = devices.local_devices(devices.kind_of(config))
        if wanted > have:  # a queue consumed by a worker too small for it
            end = multiprocess.Ending(
                "finished",
                RunStatus.FAILED,
                f"config.resources.processes: {wanted} processes asked, the worker "
                f"that took the run has {have} devices (WORKER_DEVICES)",
            )
        else:
            prune_unrecorded_checkpoints(claim.run_id, root)
            end = multiprocess.train(
                claim, wanted, root, interrupted=_interrupted.is_set
            )
    except Exception as exc:
        log.exception("run %s attempt %s failed", claim.run_id, claim.attempt)
        end = multiprocess.Ending(
            "finished", RunStatus.FAILED, failure_message(exc), traceback.format_exc()
        )
    if end.kind == "interrupted":
        log.warning("run %s: interrupted by shutdown; resumes on restart", claim.run_id)
        lease.end_attempt(
            claim.run_id, claim.attempt, "interrupted", "the server stopped"
        )
        return "interrupted"
    if end.kind == "requeue":
        log.warning("run %s attempt %s: %s", claim.run_id, claim.attempt, end.message)
        return "requeued" if lease.requeue(claim, end.message) else "lease-lost"
    if end.status == RunStatus.CANCELLED and lease.pause_asked(claim):
        # Stopped by its owner's pause: its state at the stop kept by rank 0's
        # save_on_stop (dashboard.runs.rank), or cut short past the grace period.
        cut = "" if end.last_step is not None else lease.CUT_SHORT
        return str(lease.hold(claim, end.last_step, cut) or "lease-lost")
    if end.kind == "lease-lost" or not lease.finish(
        claim,
        end.status,
        message=end.message,
        detail=end.detail,
        last_step=end.last_step,
    ):
        return "lease-lost"
    return end.status
