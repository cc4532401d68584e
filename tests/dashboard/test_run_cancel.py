"""Cancel always stops a run (issue 21.4): inside a long generation, and past the grace
period even when the trainer never asks (in-process here; a Celery worker in
test_run_cancel_services.py)."""

from __future__ import annotations

import threading
import time

import pytest
from dashtest import execute_in_thread, wait_for

from dashboard.models import MetricPoint, Run, RunStatus
from dashboard.runs import services

pytestmark = pytest.mark.django_db(transaction=True)


start = execute_in_thread


def status(run) -> str:
    return Run.objects.get(pk=run.pk).status


def test_a_run_stuck_in_a_long_generation_stops_within_seconds_of_the_cancel(
    owner, tiny_config, settings, tmp_path, monkeypatch
):
    import trainer.policy as policy_module

    settings.RUNS_DIR = tmp_path / "runs"
    settings.RUN_CANCEL_GRACE_SECONDS = 600  # the trainer must stop by itself
    real_renderer, real_generate = (
        policy_module.make_renderer,
        policy_module.Policy.generate,
    )
    generating = threading.Event()

    def never_ending(*args, **kwargs):
        renderer = real_renderer(*args, **kwargs)
        renderer.stop_ids = (-1,)  # no action ends before its 4096 tokens
        return renderer

    def generate(self, *args, **kwargs):
        generating.set()
        return real_generate(self, *args, **kwargs)

    monkeypatch.setattr(policy_module, "make_renderer", never_ending)
    monkeypatch.setattr(policy_module.Policy, "generate", generate)
    config = {
        **tiny_config,
        "steps": 3,
        "rollout": {
            "tasks_per_step": 4,
            "group_size": 4,
            "max_turns": 4,
            "max_action_tokens": 4096,
            "max_total_tokens": 16384,
        },
    }
    run = services.launch_run(owner, config)
    worker = start(run)
    assert generating.wait(120), "generation never started"
    time.sleep(0.5)  # well inside the first action's 4096 tokens
    cancelled_at = time.monotonic()
    services.cancel_run(Run.objects.get(pk=run.pk))
    wait_for(lambda: status(run) == RunStatus.CANCELLED, 60, message="the cancel")
    took = time.monotonic() - cancelled_at
    print(f"cancelled {took:.2f} s after the cancel")
    worker.join(30)
    assert not worker.is_alive()
    run.refresh_from_db()
    # Step 1 (16 rollouts of up to 16,384 tokens) was dropped, never finished.
    assert run.last_step == 0 and not MetricPoint.objects.filter(run=run).exists()
    assert run.error == ""
    assert took < 15, f"{took:.1f} s from the cancel to a cancelled run"


def test_a_run_that_never_asks_is_cancelled_and_ended_after_the_grace_period(
    owner, tiny_config, fake_runner, settings, monkeypatch
):
    settings.RUN_CANCEL_GRACE_SECONDS = 1
    monkeypatch.setenv("FAKE_RUNNER_DEAF", "1")
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0.05")
    run = services.launch_run(owner, {**tiny_config, "steps": 100_000})
    worker = start(run)
    wait_for(lambda: Run.objects.get(pk=run.pk).last_step >= 2, 60, message="step 2")
    cancelled_at = time.monotonic()
    services.cancel_run(Run.objects.get(pk=run.pk))
    wait_for(lambda: status(run) == RunStatus.CANCELLED, 30, message="the cancel")
    took = time.monotonic() - cancelled_at
    print(f"cancelled {took:.2f} s after the cancel")
    worker.join(30)
    assert not worker.is_alive(), "the run's thread is still training"
    run.refresh_from_db()
    assert "did not stop within 1 s of the cancel" in run.error
    assert run.lease is None
    # grace 1 s plus a poll of the run's row on either side, generously
    assert took < 10, f"{took:.1f} s from the cancel to a cancelled run"
    last = run.last_step
    time.sleep(0.5)
    assert Run.objects.get(pk=run.pk).last_step == last  # nothing writes any more
