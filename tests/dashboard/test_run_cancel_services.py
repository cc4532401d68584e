"""Issue 21: 4 and 7b on the production path, with a real Celery worker: it announces
what it serves (and withdraws at shutdown), and a run that never answers a cancel is
cancelled and its prefork child killed, after which the worker serves the next run."""

from __future__ import annotations

import json
import signal
import time

import pytest
from dashtest import client_for, wait_for

from dashboard.models import Run, Worker
from dashboard.runs import services, workers

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]
FAKE = "fake_runner.run_from_config"


def status(run_id) -> str:
    return Run.objects.get(pk=run_id).status


def test_a_worker_announces_what_it_serves_and_submit_follows(
    owner, tiny_config, procs, settings
):
    settings.RUN_REFUSE_UNSERVED = True
    with pytest.raises(services.InvalidConfig, match="no worker is announcing"):
        services.launch_run(owner, tiny_config)
    proc = procs.worker(RUN_TRAINER=FAKE)
    offers = wait_for(workers.live_offers, 60, message="the worker's announcement")
    assert {"cpu", "gpu"} <= set(offers[0].queues)  # -Q <ns>cpu,<ns>gpu, unprefixed
    assert offers[0].ram_bytes
    run = services.launch_run(owner, tiny_config)
    wait_for(lambda: status(run.pk) == "succeeded", 120, message="the run")
    procs.kill(proc, signal.SIGTERM)  # a warm shutdown withdraws the announcement
    assert not Worker.objects.exists()
    with pytest.raises(services.InvalidConfig, match="config.model.device"):
        services.launch_run(owner, tiny_config)


def test_a_run_that_never_answers_is_cancelled_and_its_child_killed(
    owner, tiny_config, procs
):
    procs.worker(
        RUN_TRAINER=FAKE,
        FAKE_RUNNER_DEAF="1",
        FAKE_RUNNER_STEP_S="0.05",
        RUN_CANCEL_GRACE_SECONDS="1",
    )
    client = client_for(owner)
    r = client.post(
        "/api/runs",
        json.dumps({"config": {**tiny_config, "steps": 100_000}}),
        content_type="application/json",
    )
    run_id = r.json()["id"]
    wait_for(lambda: Run.objects.get(pk=run_id).last_step >= 2, 120, message="step 2")
    cancelled_at = time.monotonic()
    r = client.post(f"/api/runs/{run_id}/cancel", "{}", content_type="application/json")
    assert r.status_code == 200
    wait_for(lambda: status(run_id) == "cancelled", 30, message="the cancel")
    took = time.monotonic() - cancelled_at
    print(f"cancelled {took:.2f} s after the cancel")
    run = Run.objects.get(pk=run_id)
    assert "did not stop within 1 s of the cancel" in run.error
    last = run.last_step
    time.sleep(2)
    assert Run.objects.get(pk=run_id).last_step == last  # its child is gone
    assert took < 15
    # The pool replaced the child: the same worker takes the next run.
    second = services.launch_run(owner, tiny_config)
    wait_for(lambda: status(second.pk) == "succeeded", 120, message="the next run")
