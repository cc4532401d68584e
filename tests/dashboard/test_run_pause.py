"""Pause and Resume (dashboard/runs/pausing.py): a run its owner stops for a while
and goes on from where it stopped, step for step, never spliced."""

from __future__ import annotations

import time

import pytest
from dashtest import client_for, execute_in_thread, wait_for

from dashboard.models import Checkpoint, MetricPoint, Run, RunAttempt, RunStatus
from dashboard.runs import lease, pausing, services

pytestmark = pytest.mark.django_db(transaction=True)


start = execute_in_thread


def status(run) -> str:
    return Run.objects.get(pk=run.pk).status


def test_a_paused_run_keeps_its_steps_and_goes_on_from_them_when_resumed(
    owner, tiny_config, settings, tmp_path, enqueued
):
    """The real trainer: paused between scheduled checkpoints, it keeps its state
    at the stop, waits out of the queue, and resumed ends with every step once."""
    settings.RUNS_DIR = tmp_path / "runs"
    cfg = {**tiny_config, "steps": 8, "checkpoint": {"every": 0}}
    run = services.launch_run(owner, cfg)
    worker = start(run)
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 2, 120, message="step 2")
    pausing.pause_run(Run.objects.get(pk=run.pk))
    assert Run.objects.get(pk=run.pk).pause_requested
    wait_for(lambda: status(run) == RunStatus.PAUSED, 60, message="the pause")
    worker.join(30)
    run.refresh_from_db()
    at = run.last_step
    assert 2 <= at < 8 and run.lease is None and not run.pause_requested
    assert run.error == (
        f"Paused by its owner at step {at}; Resume queues it again from there."
    )
    first = RunAttempt.objects.get(run=run, number=1)
    assert first.outcome == lease.PAUSED and first.ended_at is not None
    # its state at the stop, though no checkpoint was scheduled
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [
        at
    ]
    assert lease.claim(run.pk) is None  # out of the queue: nobody takes it

    n = len(enqueued)
    pausing.resume_run(run)
    assert status(run) == RunStatus.QUEUED and len(enqueued) == n + 1
    start(run).join(300)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.error == ""
    assert run.attempt == 2 and run.last_step == 8
    steps = list(
        MetricPoint.objects.filter(run=run, key="reward")
        .order_by("step")
        .values_list("step", flat=True)
    )
    assert steps == list(range(1, 9))  # each step once: nothing trained twice
    second = RunAttempt.objects.get(run=run, number=2)
    assert second.outcome == RunStatus.SUCCEEDED


def test_a_queued_run_pauses_at_once_and_a_paused_one_can_be_cancelled(
    owner, tiny_config, enqueued
):
    run = services.launch_run(owner, tiny_config)
    run = pausing.pause_run(run)
    assert run.status == RunStatus.PAUSED and run.enqueued_at is None
    assert run.error == pausing.NOT_STARTED
    assert "before it started" in run.error
    assert lease.claim(run.pk) is None
    with pytest.raises(services.Conflict, match="already paused"):
        pausing.pause_run(run)
    run = services.cancel_run(run)
    assert run.status == RunStatus.CANCELLED and run.finished_at is not None
    with pytest.raises(services.Conflict, match="not paused"):
        pausing.resume_run(run)
    with pytest.raises(services.Conflict, match="already cancelled"):
        pausing.pause_run(run)


def test_resume_keeps_to_the_owners_limit_of_active_runs(
    owner, tiny_config, settings, enqueued
):
    settings.RUN_MAX_ACTIVE_PER_USER = 1
    paused = pausing.pause_run(services.launch_run(owner, tiny_config))
    services.launch_run(owner, tiny_config)  # the pause freed its place
    with pytest.raises(services.Conflict, match="limit 1"):
        pausing.resume_run(paused)
    assert status(paused) == RunStatus.PAUSED


def test_a_pause_that_the_trainer_never_hears_pauses_it_after_the_grace_period(
    owner, tiny_config, fake_runner, settings, monkeypatch
):
    settings.RUN_CANCEL_GRACE_SECONDS = 1
    settings.RUN_PAUSE_GRACE_SECONDS = 2  # a pause waits longer than a cancel
    monkeypatch.setenv("FAKE_RUNNER_DEAF", "1")
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0.05")
    run = services.launch_run(owner, {**tiny_config, "steps": 100_000})
    worker = start(run)
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 2, 60, message="step 2")
    pausing.pause_run(Run.objects.get(pk=run.pk))
    wait_for(lambda: status(run) == RunStatus.PAUSED, 30, message="the pause")
    worker.join(30)
    assert not worker.is_alive(), "the run's thread is still training"
    run.refresh_from_db()
    assert run.lease is None and run.finished_at is None
    assert "did not stop within the grace period" in run.error
    last = run.last_step
    time.sleep(0.5)
    assert Run.objects.get(pk=run.pk).last_step == last  # nothing writes any more


def test_pause_and_resume_over_the_api_and_the_page(
    owner, other, tiny_config, enqueued
):
    run = services.launch_run(owner, tiny_config)
    api, page = client_for(owner), client_for(owner)
    assert client_for(other).post(f"/api/runs/{run.pk}/pause").status_code == 404
    html = page.get(f"/runs/{run.pk}/").content.decode()
    assert "data-pause-form" in html and "data-resume-form" not in html
    r = api.post(f"/api/runs/{run.pk}/pause")
    assert r.status_code == 200 and r.json()["status"] == "paused"
    assert api.post(f"/api/runs/{run.pk}/pause").status_code == 409
    html = page.get(f"/runs/{run.pk}/").content.decode()
    assert "data-resume-form" in html and "data-pause-form" not in html
    assert "Cancel this paused run?" in html
    assert (
        '<div class="notice" data-run-error><strong>Note:</strong> Paused by its owner'
        in html
    )
    home = page.get("/").content.decode()
    active = home[home.index('data-rows-region="active"') :]
    assert f'data-run-row="{run.pk}"' in active.split("</section>")[0]

    r = page.post(f"/runs/{run.pk}/resume/", follow=True)
    assert "Resumed: queued to go on." in r.content.decode()
    assert status(run) == RunStatus.QUEUED

    # Running: a pause is asked, the button says so until the run stops.
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, last_step=3)
    r = page.post(f"/runs/{run.pk}/pause/", follow=True)
    html = r.content.decode()
    assert "Pause requested: the run stops at its next step" in html
    assert "Pausing…</button>" in html and status(run) == RunStatus.RUNNING
    body = api.get(f"/api/runs/{run.pk}").json()
    assert body["pause_requested"] is True
    claim = lease.Claim(run.pk, run.lease or run.pk, 1, {})
    Run.objects.filter(pk=run.pk).update(lease=claim.token)
    assert lease.should_stop(claim) and lease.pause_asked(claim)
    services.cancel_run(Run.objects.get(pk=run.pk))  # a cancel overrules the pause
    assert not lease.pause_asked(claim)


def test_another_trainers_run_cannot_be_paused(owner):
    run = Run.objects.create(
        owner=owner, name="trl", config={}, external=True, status="running"
    )
    r = client_for(owner).post(f"/api/runs/{run.pk}/pause")
    assert r.status_code == 409 and "trained elsewhere" in r.json()["detail"]
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "data-pause-form" not in html


def _running(owner, tiny_config, **fields):
    run = services.launch_run(owner, tiny_config)
    claim = lease.claim(run.pk)
    Run.objects.filter(pk=run.pk).update(last_step=4, **fields)
    return run, claim


def test_a_paused_run_whose_worker_died_is_paused_not_queued_again(
    owner, tiny_config, enqueued
):
    """Reaped (its heartbeat stopped) before it reached its next step: the pause
    holds, from its last checkpoint, whatever attempts remain."""
    from datetime import timedelta

    from django.utils import timezone

    for attempts_left in (True, False):
        run, claim = _running(owner, tiny_config)
        if not attempts_left:
            Run.objects.filter(pk=run.pk).update(attempt=99)
        pausing.pause_run(Run.objects.get(pk=run.pk))
        old = timezone.now() - timedelta(hours=1)
        Run.objects.filter(pk=run.pk).update(heartbeat_at=old)
        sent = len(enqueued)
        lease.reap()
        run.refresh_from_db()
        assert (run.status, run.pause_requested) == (RunStatus.PAUSED, False)
        assert run.error == (
            "Paused by its owner at step 4" + lease.CUT_SHORT + "; Resume queues it "
            "again from there."
        )
        assert run.finished_at is None and len(enqueued) == sent


def test_a_cancel_after_the_pause_was_heard_ends_the_run(owner, tiny_config, enqueued):
    run, claim = _running(owner, tiny_config)
    pausing.pause_run(Run.objects.get(pk=run.pk))
    assert lease.pause_asked(claim)
    services.cancel_run(Run.objects.get(pk=run.pk))  # between the check and the hold
    assert lease.hold(claim, 5) == RunStatus.CANCELLED
    run.refresh_from_db()
    assert (run.status, run.error, run.last_step) == (RunStatus.CANCELLED, "", 5)
    assert run.finished_at is not None and run.attempts.get().outcome == "cancelled"


def test_a_cancelled_paused_run_no_longer_says_resume(owner, tiny_config, enqueued):
    run = pausing.pause_run(services.launch_run(owner, tiny_config))
    run = services.cancel_run(run)
    assert run.status == RunStatus.CANCELLED and run.error == ""
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "Resume" not in html and "data-cancel-menu" not in html


def test_a_run_being_cancelled_offers_no_pause(owner, tiny_config, enqueued):
    run, _ = _running(owner, tiny_config, cancel_requested=True)
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "data-pause-form" not in html and "data-cancel-menu" in html
