"""Stopping ``manage.py serve`` (Ctrl-C) while a run trains in-process: the run stops at
its next step and stays resumable instead of holding the exit until it ends (the long
demo of ``make run`` trains for half an hour)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from dashtest import wait_for
from django.db import connection
from django.utils import timezone

from dashboard.models import Run
from dashboard.runs import execution, lease, services
from dashboard.runs.jobs import execute_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def interrupt():
    yield execution.interrupt
    execution._interrupted.clear()


@pytest.mark.slow
def test_an_interrupted_run_stops_at_its_next_step_and_resumes_later(
    owner, tiny_config, fake_runner, enqueued, published, monkeypatch, interrupt
):
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0.05")
    run = services.launch_run(owner, {**tiny_config, "steps": 400})
    result: list[str] = []

    def work():
        try:
            result.append(execute_run.run(str(run.id)))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 3, 30, message="step 3")
    interrupt()
    worker.join(30)
    assert not worker.is_alive() and result == ["interrupted"]
    run.refresh_from_db()
    assert run.status == "running" and run.last_step < 400  # not cancelled, not done
    first = run.attempts.get(number=1)
    assert (first.outcome, first.message) == ("interrupted", "the server stopped")

    execution._interrupted.clear()  # the next process
    later = timezone.now() + timedelta(hours=1)
    assert lease.reap(now=later) == [run.id]
    run.refresh_from_db()
    assert run.error == "attempt 1: the server stopped; trying again"
    assert run.attempts.get(number=1).outcome == "interrupted"  # not "unresponsive"
    assert execute_run.run(str(run.id)) == "succeeded"
    run.refresh_from_db()
    assert (run.status, run.attempt, run.last_step, run.error) == (
        "succeeded",
        2,
        400,
        "",
    )


def test_stopping_the_embedded_executor_waits_for_the_run_to_reach_its_next_step(
    owner, tiny_config, fake_runner, enqueued, published, monkeypatch, interrupt
):
    # manage.py serve's exit: the executor's thread is a daemon, and an interpreter
    # that exits while it is inside a step can crash on the way out ("Segmentation
    # fault"); stop() waits for the step to end. The launch enqueues nothing
    # (``enqueued``): with the embedded executor its own submission raced this
    # one's, and a future the executor had not taken yet was cancelled by stop().
    from dashboard.runs import inprocess

    monkeypatch.setattr(inprocess, "_stopping", False)  # restored for other tests
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0.05")
    run = services.launch_run(owner, {**tiny_config, "steps": 400})
    outcome = inprocess.submit(str(run.id))
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 3, 30, message="step 3")
    assert inprocess.executing()
    assert inprocess.stop(wait_s=30)  # the thread has ended
    assert not inprocess.executing()
    assert outcome.result(timeout=1) == "interrupted"
    assert Run.objects.get(pk=run.pk).status == "running"  # resumable, not ended
