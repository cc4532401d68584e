"""A run of several processes on the platform: routed to a worker with the devices,
refused at submit when no worker has them, trained by ranks under torchrun (here by
the embedded in-process executor, two gloo processes on CPU), and how the ranks'
reports become the attempt's ending."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest
from dashtest import client_for, wait_for
from django.db import OperationalError

from dashboard.models import MetricPoint, Run, RunStatus, Trajectory
from dashboard.runs import devices, execution, inprocess, lease, multiprocess, services
from dashboard.runs.multiprocess import Report

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def largest_worker(settings):
    """A deployment whose largest worker has two devices."""
    settings.RUN_MAX_PROCESSES = 2


def two_process(config: dict, **extra) -> dict:
    return {
        **config,
        "rollout": {**config["rollout"], "tasks_per_step": 2},
        "resources": {"processes": 2},
        **extra,
    }


# --- routing and submit -------------------------------------------------------------
def test_a_run_of_n_processes_goes_to_the_queue_of_n_devices(
    owner, tiny_config, settings, enqueued
):
    settings.RUN_MAX_PROCESSES = 4
    settings.RUN_EXECUTOR = "celery"  # the workers' queues route the runs
    settings.RUN_QUEUE_AUTO = "gpu"
    one = services.launch_run(owner, tiny_config)
    two = services.launch_run(owner, two_process(tiny_config))
    auto = services.launch_run(
        owner, two_process(tiny_config, model={"device": "auto"})
    )
    assert [one.queue, two.queue, auto.queue] == ["cpu", "cpu-x2", "gpu-x2"]


def test_a_worker_consumes_the_queues_of_the_devices_it_has():
    consumed = ["ns.gpu", "ns.other"]
    extra = devices.extra_queues(consumed, "ns.", lambda kind: 3)
    assert extra == ["ns.gpu-x2", "ns.gpu-x3"]
    assert devices.extra_queues(["ns.cpu"], "ns.", lambda kind: 1) == []


def test_worker_devices_is_the_count_when_set(settings, monkeypatch):
    settings.WORKER_DEVICES = 3
    assert devices.local_devices("gpu") == devices.local_devices("cpu") == 3
    settings.WORKER_DEVICES = 0
    monkeypatch.setattr(devices, "cuda_devices", lambda: 0)
    monkeypatch.setattr(devices.os, "cpu_count", lambda: 6)
    assert devices.local_devices("gpu") == 6  # no CUDA: an auto run trains on the CPU
    monkeypatch.setattr(devices, "cuda_devices", lambda: 2)
    assert (devices.local_devices("gpu"), devices.local_devices("cpu")) == (2, 6)


def test_submit_trusts_the_largest_worker_or_counts_its_own_devices(settings):
    settings.WORKER_DEVICES = 2
    settings.RUN_MAX_PROCESSES = 0
    settings.RUN_EXECUTOR = "celery"
    assert devices.max_processes("cpu") == 1  # the web process cannot see workers
    settings.RUN_EXECUTOR = "inprocess"
    assert devices.max_processes("cpu") == 2  # it is the worker
    settings.RUN_MAX_PROCESSES = 8
    assert devices.max_processes("cpu") == 8


def test_a_run_asking_more_processes_than_any_worker_has_is_refused_with_400(
    owner, tiny_config, enqueued
):
    config = two_process(tiny_config, resources={"processes": 3})
    config["rollout"]["tasks_per_step"] = 3
    r = client_for(owner).post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    assert r.status_code == 400
    text = json.dumps(r.json())
    assert "config.resources.processes" in text and "at most 2" in text
    assert Run.objects.count() == 0 and enqueued == []


# --- the ranks' reports -------------------------------------------------------------
def test_all_ranks_ending_well_is_rank_0s_ending():
    reports = {
        0: Report(0, "succeeded", last_step=5, at=2.0),
        1: Report(1, "succeeded", at=1.0),
    }
    end = multiprocess.ending(reports, 2, 0)
    assert (end.kind, end.status, end.last_step) == ("finished", "succeeded", 5)


def test_a_rank_that_died_without_a_word_requeues_the_attempt():
    # Rank 0 saw its peer vanish in a collective and raised; rank 1 said nothing.
    reports = {0: Report(0, "failed", "RuntimeError: Connection closed by peer")}
    end = multiprocess.ending(reports, 2, 1)
    assert end.kind == "requeue" and "rank 1 died without a word" in end.message


def test_the_earliest_failure_is_the_runs():
    reports = {
        0: Report(0, "failed", "RuntimeError: Connection closed by peer", at=2.0),
        1: Report(1, "failed", "ValueError: bad reward", "Traceback...", at=1.0),
        2: Report(2, "terminated", "stopped by torchrun", at=2.5),
    }
    end = multiprocess.ending(reports, 3, 1)
    assert (end.kind, end.status, end.message, end.detail) == (
        "finished",
        "failed",
        "ValueError: bad reward",
        "Traceback...",
    )


def test_ranks_stopped_from_outside_requeue_the_attempt():
    reports = {0: Report(0, "terminated"), 1: Report(1, "terminated")}
    assert multiprocess.ending(reports, 2, 1).kind == "requeue"


def test_a_report_survives_the_trip_through_its_file(tmp_path):
    report = Report(1, "failed", "ValueError: x", "tb", 3, 12.5)
    multiprocess.write_report(tmp_path, report)
    (tmp_path / "rank-00002.json").write_text("{half")  # a rank killed mid-write
    assert multiprocess.read_reports(tmp_path) == {1: report}


# --- the lease ----------------------------------------------------------------------
def test_requeue_takes_the_run_back_while_attempts_remain(
    owner, tiny_config, settings, enqueued, commit
):
    settings.RUN_MAX_ATTEMPTS = 2
    run = services.launch_run(owner, two_process(tiny_config))
    for number in (1, 2):
        claim = lease.claim(run.id)
        assert claim.attempt == number
        with commit():
            assert lease.requeue(claim, "rank 1 died without a word")
        assert not lease.requeue(claim, "again")  # fenced: no longer ours
    run.refresh_from_db()
    assert (run.status, run.attempt) == (RunStatus.FAILED, 2)
    assert run.error == "rank 1 died without a word (attempt 2 of 2)"
    outcomes = list(run.attempts.values_list("outcome", "message"))
    assert outcomes == [("failed", "rank 1 died without a word")] * 2
    assert enqueued == [(str(run.id), "cpu-x2")]  # sent again once, to its queue


def test_a_worker_with_too_few_devices_fails_the_run_naming_the_field(
    owner, tiny_config, settings, enqueued
):
    settings.RUN_MAX_PROCESSES = 4
    settings.WORKER_DEVICES = 1
    run = services.launch_run(owner, two_process(tiny_config))
    assert execution.execute(run.id) == RunStatus.FAILED
    run.refresh_from_db()
    assert run.error.startswith("config.resources.processes: 2 processes asked")


@pytest.mark.django_db(transaction=True)  # the error closes the connection
def test_a_database_error_in_the_stop_check_is_no_stop(
    owner, tiny_config, monkeypatch, enqueued
):
    # A rank 0 that raised here would leave the other ranks in a collective. (No
    # executor takes the run: the test claims it.)
    run = services.launch_run(owner, tiny_config)
    claim = lease.claim(run.id)
    assert claim is not None and lease.stop_asked(claim) is False

    def locked(claim):
        raise OperationalError("database is locked")

    monkeypatch.setattr(lease, "should_stop", locked)
    assert lease.stop_asked(claim) is False
    monkeypatch.undo()
    services.cancel_run(run)
    assert lease.stop_asked(claim) is True


def test_a_rank_ends_when_torchrun_is_gone(tmp_path):
    # A parent (torchrun's stand-in) starts a child that watches it and sleeps as a
    # rank blocked in a collective would; SIGKILL to the parent ends the child.
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import time; from dashboard.runs.rank import exit_with_parent; "
        "exit_with_parent(0.05); print(flush=True); time.sleep(600)'], "
        "start_new_session=True, stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"  # watching
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        parent.kill()
        parent.wait()
        assert wait_for(lambda: not _alive(child), timeout=20)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.slow
def test_torchrun_and_its_ranks_end_when_the_worker_is_killed(tmp_path):
    # A worker (a process that starts torchrun as multiprocess.train does and waits)
    # is killed outright: torchrun dies with it, and its rank, blocked as in a
    # collective, dies with torchrun. Nothing is left for the reaper's next attempt.
    rank = (
        "import os, time; from dashboard.runs.rank import exit_with_parent; "
        f"exit_with_parent(0.05); open({str(tmp_path / 'rank')!r}, 'w')"
        ".write(str(os.getpid())); time.sleep(600)"
    )
    launch = [
        *multiprocess.TORCHRUN,
        "--standalone",
        "--nproc-per-node=1",
        "--no-python",
        sys.executable,
        "-c",
        rank,
    ]
    worker_code = (
        "import subprocess, sys\n"
        f"torchrun = subprocess.Popen({launch!r})\n"
        "print(torchrun.pid, flush=True)\n"
        "torchrun.wait()\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", worker_code], stdout=subprocess.PIPE, text=True
    )
    torchrun = int(worker.stdout.readline())
    pid_file = tmp_path / "rank"
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text(), 60)
        rank_pid = int(pid_file.read_text())
        assert _alive(torchrun) and _alive(rank_pid)
        worker.kill()
        worker.wait()
        assert wait_for(lambda: not _alive(torchrun), timeout=20), "torchrun outlived"
        assert wait_for(lambda: not _alive(rank_pid), timeout=20), "a rank outlived"
    finally:
        left = [torchrun]
        with contextlib.suppress(OSError, ValueError):
            left.append(int(pid_file.read_text()))
        for pid in filter(_alive, left):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_claim_is_read_back_by_the_ranks_only_while_the_attempt_holds_it(
    owner, tiny_config, enqueued
):
    run = services.launch_run(owner, two_process(tiny_config))
    claim = lease.claim(run.id)
    assert lease.claim_of(run.id, 1) == claim
    assert lease.claim_of(run.id, 2) is None
    lease.finish(claim, RunStatus.CANCELLED)
    assert lease.claim_of(run.id, 1) is None


# --- the embedded executor trains two gloo processes --------------------------------
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_embedded_executor_trains_a_run_on_two_processes(
    owner, tiny_config, settings, enqueued, monkeypatch, tmp_path
):
    # The ranks are processes of their own: they read the settings from the
    # environment, as a worker's do (pytest-django renamed the database).
    monkeypatch.setenv("DATABASE_URL", database_url())
    settings.RUNS_DIR = tmp_path / "runs"
    settings.RUN_EXECUTOR = "inprocess"
    settings.RUN_MAX_PROCESSES = 0
    settings.WORKER_DEVICES = 2
    steps = 4
    run = services.launch_run(owner, two_process(tiny_config, steps=steps))
    assert inprocess.submit(str(run.id)).result(timeout=240) == RunStatus.SUCCEEDED
    run.refresh_from_db()
    assert (run.status, run.attempt, run.last_step, run.error) == (
        "succeeded",
        1,
        steps,
        "",
    )
    # Every rank's rollouts reached rank 0's sink, once: 2 tasks x 2 per group.
    per_step = Trajectory.objects.filter(run=run).values_list("step", flat=True)
    assert sorted(per_step) == [s for s in range(1, steps + 1) for _ in range(4)]
    assert set(
        MetricPoint.objects.filter(run=run, key="reward").values_list("step", flat=True)
    ) == set(range(1, steps + 1))
    assert (tmp_path / "runs" / str(run.id) / "checkpoints" / "step-000004").is_dir()


def _launch_long_two_process_run(owner, tiny_config, settings, monkeypatch, tmp_path):
    """A 500-step run of two processes in the embedded executor, at step 2 or later."""
    monkeypatch.setenv("DATABASE_URL", database_url())
    settings.RUNS_DIR = tmp_path / "runs"
    settings.WORKER_DEVICES = 2
    run = services.launch_run(owner, two_process(tiny_config, steps=500))
    outcome = inprocess.submit(str(run.id))
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 2, 120, message="step 2")
    return run, outcome


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_cancel_stops_every_rank_at_the_next_step(
    owner, tiny_config, settings, enqueued, monkeypatch, tmp_path
):
    # The ranks stop by themselves at the next step: on a loaded machine a step
    # (and the checkpoint every 2) can outlast the default grace, whose kill
    # would say so in the error; this test is about the stop, not the grace.
    settings.RUN_CANCEL_GRACE_SECONDS = 90
    run, outcome = _launch_long_two_process_run(
        owner, tiny_config, settings, monkeypatch, tmp_path
    )
    services.cancel_run(run)
    assert outcome.result(timeout=120) == RunStatus.CANCELLED
    run.refresh_from_db()
    assert (run.status, run.attempt, run.error) == ("cancelled", 1, "")
    assert run.last_step < 500 and run.attempts.get().outcome == "cancelled"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_pause_stops_every_rank_keeping_the_state_and_resume_goes_on(
    owner, tiny_config, settings, enqueued, monkeypatch, tmp_path
):
    """Rank 0 asks whether to keep the state at the stop (its owner's pause) and
    the trainer broadcasts the answer: every rank saves the step it stopped at, so
    the next attempt goes on from it (no checkpoint is scheduled: without the
    state at the stop, it would start again from nothing)."""
    from dashboard.models import Checkpoint
    from dashboard.runs import pausing

    settings.RUN_CANCEL_GRACE_SECONDS = 90
    unscheduled = {**tiny_config, "checkpoint": {"every": 0}}
    run, outcome = _launch_long_two_process_run(
        owner, unscheduled, settings, monkeypatch, tmp_path
    )
    pausing.pause_run(run)
    assert outcome.result(timeout=120) == "paused"
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.attempt == 1
    assert run.error.startswith(f"Paused by its owner at step {run.last_step};")
    assert run.attempts.get().outcome == "paused"
    kept = Checkpoint.objects.filter(run=run).order_by("-step").first()
    assert kept is not None and kept.step == run.last_step  # the step it stopped at
    at = run.last_step
    pausing.resume_run(run)
    assert inprocess.submit(str(run.id)) is not None
    wait_for(
        lambda: Run.objects.get(pk=run.pk).last_step > at, 120, message="a step on"
    )
    services.cancel_run(Run.objects.get(pk=run.pk))
    wait_for(
        lambda: Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED,
        120,
        message="the cancel",
    )
    run.refresh_from_db()
    assert run.attempt == 2
    steps = list(
        MetricPoint.objects.filter(run=run, key="reward")
        .order_by("step")
        .values_list("step", flat=True)
    )
    assert steps == list(range(1, run.last_step + 1))  # each step once


def stuck_trainer(config, sink, *, parallel, **kwargs):
    """A rank 0 that never asks ``should_stop``, and a rank 1 that SIGTERM does
    not reach (as a rank blocked in native code, whose handler cannot run)."""
    if parallel.rank == 1:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_ranks_that_do_not_stop_are_ended_after_the_grace_and_none_is_left(
    owner, tiny_config, settings, enqueued, monkeypatch, tmp_path
):
    # The worker gives torchrun 5 s after the grace, less than torchrun gives a
    # rank (30 s) before its SIGKILL: rank 1 outlived torchrun until the ranks
    # watched their parent.
    settings.RUN_CANCEL_GRACE_SECONDS = 1
    run, outcome = _launch_with_trainer(
        "stuck_trainer", owner, tiny_config, settings, monkeypatch, tmp_path
    )
    with _no_rank_left(run.id):
        wait_for(lambda: len(_rank_pids(run.id)) == 2, 120, message="two ranks")
        services.cancel_run(run)
        assert outcome.result(timeout=120) == RunStatus.CANCELLED
        run.refresh_from_db()
        assert run.status == "cancelled" and "did not stop within 1 s" in run.error


def hanging_teardown_trainer(config, sink, *, parallel, **kwargs):
    """Trains nothing and succeeds; taking the process group down then hangs (as
    PyTorch's can, #56297)."""
    parallel.close = lambda: time.sleep(600)
    return types.SimpleNamespace(status="succeeded", error=None)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_ranks_that_hang_in_their_teardown_are_stopped_and_the_run_ends(
    owner, tiny_config, settings, enqueued, monkeypatch, tmp_path
):
    monkeypatch.setattr(multiprocess, "EXIT_GRACE_S", 1.0)
    run, outcome = _launch_with_trainer(
        "hanging_teardown_trainer", owner, tiny_config, settings, monkeypatch, tmp_path
    )
    with _no_rank_left(run.id):
        assert outcome.result(timeout=120) == RunStatus.SUCCEEDED
        run.refresh_from_db()
        assert (run.status, run.error) == ("succeeded", "")


def _launch_with_trainer(trainer, owner, tiny_config, settings, monkeypatch, tmp_path):
    """A two-process run whose ranks run this module's ``trainer``."""
    monkeypatch.setenv("DATABASE_URL", database_url())
    monkeypatch.setenv("RUN_TRAINER", f"{__name__}.{trainer}")
    here = os.path.dirname(__file__)  # the ranks import this module
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.getcwd()]))
    settings.RUNS_DIR = tmp_path / "runs"
    settings.WORKER_DEVICES = 2
    run = services.launch_run(owner, two_process(tiny_config, steps=500))
    return run, inprocess.submit(str(run.id))


@contextlib.contextmanager
def _no_rank_left(run_id):
    """After the block, no rank of the run may be alive within 15 s (any left is
    killed, so that a failure leaves nothing behind)."""
    try:
        yield
        assert wait_for(lambda: not _rank_pids(run_id), 15, message="no rank left")
    finally:
        for pid in _rank_pids(run_id):
            os.kill(pid, signal.SIGKILL)


def _rank_pids(run_id) -> list[int]:
    """Live processes running ``dashboard.runs.rank`` for this run."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        ours = (
            b"dashboard.runs.rank" in args
            and multiprocess.TORCHRUN[-1].encode() not in args  # torchrun itself
            and str(run_id).encode() in args
        )
        if ours and _alive(int(entry)):
            pids.append(int(entry))
    return pids


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_stopping_the_server_stops_the_ranks_and_leaves_the_run_resumable(
    owner, tiny_config, settings, enqueued, monkeypatch, tmp_path
):
    run, outcome = _launch_long_two_process_run(
        owner, tiny_config, settings, monkeypatch, tmp_path
    )
    execution.interrupt()
    try:
        assert outcome.result(timeout=120) == "interrupted"
    finally:
        execution._interrupted.clear()
    run.refresh_from_db()
    assert run.status == "running" and run.attempts.get().outcome == "interrupted"
    # torchrun stopped both ranks (SIGTERM): each said so before it went.
    reports = multiprocess.read_reports(multiprocess.reports_dir(run.id, 1))
    assert [reports[r].status for r in sorted(reports)] == ["terminated"] * 2


def database_url() -> str:
    """The test database as a URL the ranks can read (PostgreSQL or a SQLite file)."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    from dashtest import test_database_url

    return test_database_url()
