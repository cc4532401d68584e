"""The worker code path (tasks.execute_run -> lease -> runner -> sink), in-process."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from dashtest import wait_for
from django.db import connection
from django.utils import timezone

from dashboard.models import Checkpoint, MetricPoint, Run, RunStatus, Trajectory
from dashboard.runs import execution, lease, services
from dashboard.runs.jobs import execute_run

pytestmark = pytest.mark.django_db(transaction=True)


def metric_table(run_id):
    return {
        (s, k): v
        for s, k, v in MetricPoint.objects.filter(run_id=run_id).values_list(
            "step", "key", "value"
        )
    }


def same(a, b):
    """Equal tables, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a
    )


def test_a_queued_run_executes_to_success(
    owner, tiny_config, fake_runner, enqueued, published
):
    run = services.launch_run(owner, tiny_config)
    assert execute_run.run(str(run.id)) == "succeeded"
    run.refresh_from_db()
    assert (run.status, run.attempt, run.last_step, run.lease) == (
        "succeeded",
        1,
        5,
        None,
    )
    assert MetricPoint.objects.filter(run=run).count() == 5 * 5
    assert list(
        Checkpoint.objects.filter(run=run)
        .values_list("step", flat=True)
        .order_by("step")
    ) == [2, 4, 5]
    assert published[-1]["status"] == "succeeded"
    assert [f["seq"] for f in published] == sorted(f["seq"] for f in published)


def test_a_second_delivery_of_the_same_task_is_a_no_op(
    owner, tiny_config, fake_runner, enqueued, published
):
    run = services.launch_run(owner, tiny_config)
    execute_run.run(str(run.id))
    assert execute_run.run(str(run.id)) == "skipped"
    assert Run.objects.get(pk=run.pk).attempt == 1


def test_a_trainer_exception_fails_the_run_with_the_error(
    owner, tiny_config, fake_runner, enqueued, published, monkeypatch
):
    monkeypatch.setenv("FAKE_RUNNER_FAIL_AT", "3")
    run = services.launch_run(owner, tiny_config)
    assert execute_run.run(str(run.id)) == "failed"
    run.refresh_from_db()
    assert run.status == "failed" and "boom at step 3" in run.error
    assert set(MetricPoint.objects.filter(run=run).values_list("step", flat=True)) == {
        1,
        2,
    }


def test_cancel_stops_a_running_run_within_one_step(
    owner, tiny_config, fake_runner, enqueued, published, monkeypatch
):
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0.05")
    run = services.launch_run(owner, {**tiny_config, "steps": 500})

    def work():
        try:
            execute_run.run(str(run.id))
        finally:
            connection.close()  # this thread's own connection

    worker = threading.Thread(target=work)
    worker.start()
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 3, 30, message="step 3")
    services.cancel_run(Run.objects.get(pk=run.pk))
    at_cancel = Run.objects.get(pk=run.pk).last_step
    worker.join(30)
    run.refresh_from_db()
    assert run.status == "cancelled"
    # should_stop is polled before every step: at most the step in flight finishes.
    assert run.last_step <= at_cancel + 2


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs (no finish, no status)."""


def test_a_reaped_run_resumes_from_its_checkpoint_and_matches_an_uninterrupted_run(
    owner, tiny_config, fake_runner, enqueued, published, monkeypatch, settings
):
    config = {**tiny_config, "steps": 9, "checkpoint": {"every": 3}}
    clean = services.launch_run(owner, config)
    execute_run.run(str(clean.id))

    run = services.launch_run(owner, config)
    real = fake_runner.run_from_config

    def dies_at_step_8(cfg, sink, **kw):
        class Dying:
            def emit(self, event):
                if event.get("type") == "step" and event["step"] == 8:
                    sink.flush()  # rows of step 7 are committed, like a slow kill
                    raise Killed
                sink.emit(event)

        return real(cfg, Dying(), **kw)

    monkeypatch.setattr(fake_runner, "run_from_config", dies_at_step_8)
    with pytest.raises(Killed):
        execute_run.run(str(run.id))
    assert Run.objects.get(pk=run.pk).status == "running"
    assert max(s for s, _ in metric_table(run.id)) == 7

    monkeypatch.setattr(fake_runner, "run_from_config", real)
    Run.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    assert lease.reap() == [run.id]
    assert enqueued[-1] == (str(run.id), "cpu")
    assert execute_run.run(str(run.id)) == "succeeded"
    run.refresh_from_db()
    assert (run.status, run.attempt) == ("succeeded", 2)
    assert same(metric_table(run.id), metric_table(clean.id))
    assert (
        Trajectory.objects.filter(run=run).count()
        == Trajectory.objects.filter(run=clean).count()
    )


def test_a_checkpoint_the_database_never_recorded_is_not_resumed_from(
    owner, tiny_config, fake_runner, enqueued, published
):
    run = services.launch_run(owner, {**tiny_config, "checkpoint": {"every": 0}})
    root = execution.checkpoint_dir(run.id)
    (root / "step-000004").mkdir(parents=True)  # on disk, but its rows never committed
    execute_run.run(str(run.id))
    assert not (root / "step-000004").exists()
    assert set(MetricPoint.objects.filter(run=run).values_list("step", flat=True)) == {
        1,
        2,
        3,
        4,
        5,
    }


def test_the_reaper_gives_up_after_the_last_attempt(
    owner, tiny_config, enqueued, published, settings
):
    settings.RUN_MAX_ATTEMPTS = 2
    run = services.launch_run(owner, tiny_config)
    stale = timezone.now() - timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS + 5)
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, attempt=2, heartbeat_at=stale
    )
    assert lease.reap() == []
    run.refresh_from_db()
    assert run.status == RunStatus.UNRESPONSIVE and "heartbeat stopped" in run.error


def test_the_reaper_leaves_live_runs_alone_and_finishes_cancelled_ones(
    owner, tiny_config, enqueued, published, settings
):
    live = services.launch_run(owner, tiny_config)
    Run.objects.filter(pk=live.pk).update(
        status=RunStatus.RUNNING, attempt=1, heartbeat_at=timezone.now()
    )
    dead = services.launch_run(owner, tiny_config)
    stale = timezone.now() - timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS + 5)
    Run.objects.filter(pk=dead.pk).update(
        status=RunStatus.RUNNING, attempt=1, heartbeat_at=stale, cancel_requested=True
    )
    assert lease.reap() == []
    assert Run.objects.get(pk=live.pk).status == RunStatus.RUNNING
    assert Run.objects.get(pk=dead.pk).status == RunStatus.CANCELLED


def test_the_embedded_executor_runs_submitted_runs_in_a_thread(
    owner, tiny_config, fake_runner, published
):
    from dashboard.runs import inprocess

    run = services.launch_run(owner, tiny_config)
    inprocess.submit(str(run.id)).result(timeout=60)
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_embedded_recovery_requeues_orphans_and_submits_queued_runs(
    owner, tiny_config, fake_runner, published, enqueued, monkeypatch
):
    from dashboard.runs import inprocess

    submitted = []
    monkeypatch.setattr(inprocess, "submit", submitted.append)
    orphan = services.launch_run(owner, tiny_config)
    Run.objects.filter(pk=orphan.pk).update(
        status=RunStatus.RUNNING, attempt=1, heartbeat_at=timezone.now()
    )
    queued = services.launch_run(owner, tiny_config)
    time.sleep(0.01)
    assert inprocess.recover() == [str(orphan.id), str(queued.id)]
    assert submitted == [str(orphan.id), str(queued.id)]


def test_a_stop_keeps_the_runs_state_for_a_pause_or_a_shutdown_not_a_cancel():
    """``save_on_stop``, for trainers that take it: True while the server shuts down
    (the run resumes on restart) or a demo pauses; False for a cancel."""

    def trainer(config, sink, *, should_stop=None, save_on_stop=None): ...

    def older(config, sink, *, should_stop=None): ...

    assert execution.resume_kwargs(older, demo=True) == {}
    keep = execution.resume_kwargs(trainer, demo=False)["save_on_stop"]
    demo = execution.resume_kwargs(trainer, demo=True)["save_on_stop"]
    try:
        assert not keep() and not demo()  # a cancel
        execution.pause_demo()
        assert demo() and not keep()  # a user's run pauses demos only
        execution.clear_pause()
        execution._interrupted.set()
        assert keep() and demo()  # the server stops under both
    finally:
        execution._interrupted.clear()
        execution.clear_pause()
