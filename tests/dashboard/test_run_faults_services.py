"""Faults on the production path: a worker killed with SIGKILL, Redis restarted,
a cancel. The database must end with every (run, step, key) exactly once."""

from __future__ import annotations

import json
import signal
import time

import pytest
from dashtest import PY, client_for, wait_for
from fake_runner import metrics_for

from dashboard.models import MetricPoint, Run, Trajectory
from dashboard.runs import services

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

TRAINERS = {
    "fake": "fake_runner.run_from_config",
    "real": "trainer.runner.run_from_config",
}
# Wall-clock metrics differ between any two runs; everything else must match exactly.
NONDETERMINISTIC = ("timing_s/", "perf/")


def metric_table(run_id):
    rows = MetricPoint.objects.filter(run_id=run_id).values_list("step", "key", "value")
    return {(s, k): v for s, k, v in rows if not k.startswith(NONDETERMINISTIC)}


def assert_same_metrics(a, b):
    assert a.keys() == b.keys()
    diff = [k for k in a if not (a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]))]
    assert diff == [], [(k, a[k], b[k]) for k in diff[:10]]


def status(run_id):
    return Run.objects.get(pk=run_id).status


@pytest.mark.parametrize("trainer", ["fake", "real"])
def test_a_worker_killed_mid_run_is_resumed_from_its_checkpoint(
    trainer, owner, tiny_config, procs
):
    # 20 steps: the kill lands well before the end even on a loaded machine (the real
    # trainer reaches step 4 at ~1.5 s and step 10 at ~3.5 s here).
    steps = 20
    config = {**tiny_config, "steps": steps, "checkpoint": {"every": 3}}
    env = {
        "RUN_TRAINER": TRAINERS[trainer],
        "FAKE_RUNNER_STEP_S": "0.4",
        "RUN_LEASE_TIMEOUT_SECONDS": "4",
    }
    client = client_for(owner)
    r = client.post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    run_id = r.json()["id"]
    first = procs.worker(**env)
    wait_for(
        lambda: Run.objects.get(pk=run_id).last_step >= 4,
        180,
        message="step 4 (past checkpoint 3)",
    )
    procs.kill(first, signal.SIGKILL)  # parent and prefork child, no goodbye
    killed_at = Run.objects.get(pk=run_id).last_step
    assert status(run_id) == "running" and killed_at < steps

    procs.worker(**env)
    procs.start(
        [PY, "manage.py", "reap_runs", "--interval", "0.5"], procs_env(env), "reaper"
    )
    wait_for(
        lambda: status(run_id) in ("succeeded", "failed", "unresponsive"),
        240,
        message="the resumed run",
    )
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.attempt, run.last_step) == (
        "succeeded",
        2,
        steps,
    ), run.error
    assert run.error == ""  # the reaped attempt keeps its own history
    assert "heartbeat stopped" in run.attempts.get(number=1).message

    r = client.post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    clean_id = r.json()["id"]
    wait_for(
        lambda: status(clean_id) == "succeeded", 240, message="the uninterrupted run"
    )
    assert_same_metrics(metric_table(run_id), metric_table(clean_id))
    assert (
        Trajectory.objects.filter(run_id=run_id).count()
        == Trajectory.objects.filter(run_id=clean_id).count()
    )


def procs_env(extra):
    from dashtest import service_env

    return service_env(**extra)


def test_restarting_redis_mid_run_loses_no_row(
    owner, tiny_config, procs, private_redis, enqueued
):
    from celery import Celery
    from django.conf import settings

    config = {**tiny_config, "steps": 12, "checkpoint": {"every": 4}}
    run = services.launch_run(owner, config)
    procs.worker(
        REDIS_URL=private_redis.url,
        RUN_TRAINER=TRAINERS["fake"],
        FAKE_RUNNER_STEP_S="0.3",
    )
    broker = Celery(broker=private_redis.url, set_as_current=False)
    broker.send_task(
        "dashboard.execute_run", args=[str(run.id)], queue=f"{settings.NAMESPACE}cpu"
    )
    wait_for(lambda: Run.objects.get(pk=run.id).last_step >= 3, 120, message="step 3")
    private_redis.stop()
    time.sleep(2)
    private_redis.start()
    wait_for(lambda: status(run.id) != "running", 120, message="the run to end")
    run.refresh_from_db()
    assert (run.status, run.attempt) == ("succeeded", 1), run.error
    expected = {
        (s, k): v
        for s in range(1, 13)
        for k, v in metrics_for(config["seed"], s).items()
    }
    assert_same_metrics(metric_table(run.id), expected)
    assert Trajectory.objects.filter(run=run).count() == 12 * 2


def test_cancel_stops_a_run_on_a_worker_within_one_step(owner, tiny_config, procs):
    client = client_for(owner)
    r = client.post(
        "/api/runs",
        json.dumps({"config": {**tiny_config, "steps": 500}}),
        content_type="application/json",
    )
    run_id = r.json()["id"]
    procs.worker(RUN_TRAINER=TRAINERS["fake"], FAKE_RUNNER_STEP_S="0.3")
    wait_for(lambda: Run.objects.get(pk=run_id).last_step >= 2, 120, message="step 2")
    r = client.post(f"/api/runs/{run_id}/cancel", "{}", content_type="application/json")
    assert r.status_code == 200
    at_cancel = Run.objects.get(pk=run_id).last_step
    wait_for(lambda: status(run_id) == "cancelled", 30, message="the cancel")
    # last_step lags the trainer by at most one flush; then at most the step in flight.
    assert Run.objects.get(pk=run_id).last_step <= at_cancel + 2
