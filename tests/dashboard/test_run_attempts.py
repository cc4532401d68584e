"""What a run's owner reads when an attempt fails: one line on the run, each attempt
with its own history, the traceback only on the attempt (log and admin)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from pydantic import BaseModel, ValidationError

from dashboard.models import Run, RunAttempt, RunStatus
from dashboard.runs import lease, services
from dashboard.runs.execution import failure_message
from dashboard.runs.jobs import execute_run
from tests.dashboard.dashtest import client_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_attempt_shows_one_line_and_keeps_the_traceback_on_the_attempt(
    owner, tiny_config, fake_runner, enqueued, published, monkeypatch
):
    monkeypatch.setenv("FAKE_RUNNER_FAIL_AT", "3")
    run = services.launch_run(owner, tiny_config)
    assert execute_run.run(str(run.id)) == "failed"
    run.refresh_from_db()
    assert run.error == "RuntimeError: boom at step 3"
    (attempt,) = RunAttempt.objects.filter(run=run)
    assert (attempt.number, attempt.outcome, attempt.message) == (
        1,
        "failed",
        "RuntimeError: boom at step 3",
    )
    assert attempt.detail.startswith("Traceback (most recent call last)")
    assert "fake_runner.py" in attempt.detail and attempt.ended_at is not None


def test_a_run_that_succeeds_after_a_reaped_attempt_shows_no_error(
    owner, tiny_config, fake_runner, enqueued, published, settings
):
    run = services.launch_run(owner, tiny_config)
    claim = lease.claim(run.id)
    assert claim is not None and claim.attempt == 1
    stale = timezone.now() - timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS + 5)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=stale)
    assert lease.reap() == [run.id]
    run.refresh_from_db()
    assert run.status == "queued" and run.error.startswith("attempt 1: heartbeat")

    assert execute_run.run(str(run.id)) == "succeeded"
    run.refresh_from_db()
    assert (run.status, run.attempt, run.error) == ("succeeded", 2, "")
    first, second = RunAttempt.objects.filter(run=run)
    assert (first.number, first.outcome) == (1, RunStatus.UNRESPONSIVE)
    assert first.message.startswith("heartbeat stopped at ")
    assert (second.number, second.outcome, second.message) == (2, "succeeded", "")


def test_the_run_page_lists_attempts_and_never_a_traceback(
    owner,
    owner_client,
    tiny_config,
    fake_runner,
    enqueued,
    published,
    monkeypatch,
    settings,
):
    monkeypatch.setenv("FAKE_RUNNER_FAIL_AT", "2")
    run = services.launch_run(owner, tiny_config)
    execute_run.run(str(run.id))
    html = owner_client.get(f"/runs/{run.id}/").content.decode()
    assert "Traceback" not in html and ".py" not in html.split("Attempts")[1][:2000]
    assert "<strong>Error:</strong> RuntimeError: boom at step 2</div>" in html
    assert 'data-attempt="1"' in html and "RuntimeError: boom at step 2" in html


def test_the_reaper_giving_up_says_so_in_one_line(
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
    assert run.status == RunStatus.UNRESPONSIVE
    assert "\n" not in run.error and run.error.endswith("(attempt 2 of 2)")
    assert RunAttempt.objects.get(run=run, number=2).outcome == "unresponsive"


class _Model(BaseModel):
    x: int


def test_failure_messages_are_one_line_without_server_paths():
    try:
        _Model.model_validate({"x": "many"})
    except ValidationError as exc:
        assert failure_message(exc) == (
            "invalid configuration: x: Input should be a valid integer, "
            "unable to parse string as an integer"
        )
    err = RuntimeError(
        "bad state in /srv/app/.venv/lib/python3.11/site-packages/x/y.py\nmore"
    )
    assert failure_message(err) == "RuntimeError: bad state in <server file>"
    assert failure_message(OSError("")) == "OSError"
    assert len(failure_message(ValueError("v" * 1000))) == 300


def test_a_paused_runs_note_goes_when_it_resumes_and_a_requeue_note_stays(
    owner, tiny_config, enqueued
):
    run = services.launch_run(owner, tiny_config, demo=True)
    claim = lease.claim(run.id)
    Run.objects.filter(pk=run.pk).update(warmup={"done": 50, "of": 300, "loss": 1.0})
    assert lease.pause(claim, 0)  # in its warm start: how far it was
    run.refresh_from_db()
    assert run.error.startswith("paused in its warm start (50 of 300) for a user")
    claim = lease.claim(run.id)
    assert lease.pause(claim, 7)
    run.refresh_from_db()
    assert run.status == "queued" and run.error.startswith("paused at step 7 for")
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "data-run-error" in page and "paused at step 7" in page  # while it waits
    assert lease.claim(run.id).attempt == 3
    run.refresh_from_db()
    assert run.status == "running" and run.error == ""
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "data-run-error" not in page  # in the attempts' table only
    assert "paused at step 7" in page
    # Another attempt's note (a reaped one) is not a promise kept by the claim.
    Run.objects.filter(pk=run.pk).update(error="attempt 3: heartbeat lost")
    stale = timezone.now() - timedelta(seconds=3600)
    Run.objects.filter(pk=run.pk).update(heartbeat_at=stale)
    assert lease.reap() == [run.id]
    lease.claim(run.id)
    run.refresh_from_db()
    assert run.error.startswith("attempt 3: heartbeat")


def test_a_run_not_started_yet_shows_no_attempt_number(owner):
    """A queued run's page read "0 attempt"; it reads "—" until it starts."""
    run = Run.objects.create(owner=owner, name="q", config={})
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    stat = page.split('<div class="k">attempts</div>')[0].rsplit('<div class="v">', 1)[
        1
    ]
    assert stat.startswith('<span title="not started yet">—</span>')
    Run.objects.filter(pk=run.pk).update(attempt=1, status=RunStatus.RUNNING)
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert '<div class="v">1</div><div class="k">attempt</div>' in page
    Run.objects.filter(pk=run.pk).update(attempt=2)
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    # "2 attempts", not "2 attempt" (read as two crashes without the tooltip)
    assert '<div class="v">2</div><div class="k">attempts</div>' in page


def test_wall_time_counts_the_attempts_not_the_pause_between_them(owner):
    """A demo paused 11 minutes behind a user's run read "15m 58s" at step 15."""
    from dashboard.reads.runs import duration_s, run_dict

    now = timezone.now()
    t0 = now - timedelta(seconds=630)
    run = Run.objects.create(
        owner=owner, name="d", config={}, status=RunStatus.RUNNING, attempt=2,
        started_at=t0,
    )  # fmt: skip
    RunAttempt.objects.create(
        run=run, number=1, started_at=t0, ended_at=t0 + timedelta(seconds=60),
        outcome="paused",
    )  # fmt: skip
    RunAttempt.objects.create(run=run, number=2, started_at=now - timedelta(seconds=30))
    assert duration_s(run) == pytest.approx(90, abs=2)  # 60 + 30, not 630
    assert run_dict(run)["duration_s"] == pytest.approx(90, abs=2)
    # Ended: to its attempts' ends; the run page and the API say the same.
    end = now
    RunAttempt.objects.filter(run=run, number=2).update(ended_at=end)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=end)
    run.refresh_from_db()
    assert duration_s(run) == pytest.approx(90, abs=0.01)
    api = client_for(owner).get(f"/api/runs/{run.pk}").json()
    assert api["duration_s"] == pytest.approx(90, abs=0.01)
    listed = client_for(owner).get("/api/runs").json()["runs"]
    assert [r["duration_s"] for r in listed] == [pytest.approx(90, abs=0.01)]
