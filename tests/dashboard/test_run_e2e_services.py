"""End to end on the production path: API -> Postgres -> Celery worker (prefork
child) -> Redis channel layer -> Daphne -> a websocket client."""

from __future__ import annotations

import json
import time

import pytest
from dashtest import client_for, wait_for
from websockets.sync.client import connect

from dashboard.models import MetricPoint, Run, Trajectory

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

TRAINERS = {
    "fake": "fake_runner.run_from_config",
    "real": "trainer.runner.run_from_config",
}


def launch(client, config) -> str:
    r = client.post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    assert r.status_code == 201, r.content
    return r.json()["id"]


@pytest.mark.parametrize("trainer", ["fake", "real"])
def test_a_launched_run_executes_on_a_worker_and_streams_in_order(
    trainer, owner, tiny_config, procs
):
    client = client_for(owner)
    run_id = launch(client, tiny_config)  # queued in Redis; no worker yet
    server = procs.daphne()
    headers = {
        "Cookie": f"sessionid={client.cookies['sessionid'].value}",
        "Origin": f"http://{server}",
    }
    frames = []
    with connect(
        f"ws://{server}/ws/runs/{run_id}/", additional_headers=headers, open_timeout=15
    ) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["status"] == "queued"
        procs.worker(RUN_TRAINER=TRAINERS[trainer], FAKE_RUNNER_STEP_S="0.1")
        deadline = time.time() + 180
        while time.time() < deadline:
            frames.append(json.loads(ws.recv(timeout=deadline - time.time())))
            if frames[-1]["status"] == "succeeded":
                break
    assert frames[-1]["status"] == "succeeded", procs.logs()
    seqs = [f["seq"] for f in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # in order, none lost
    steps = [s["step"] for f in frames for s in f["steps"]]
    assert steps == [1, 2, 3, 4, 5]
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.attempt, run.last_step) == ("succeeded", 1, 5)
    per_step = {
        s: MetricPoint.objects.filter(run=run, step=s).count() for s in range(1, 6)
    }
    assert len(set(per_step.values())) == 1 and per_step[1] > 0
    per_step_trajectories = (
        2 if trainer == "fake" else 2 * 2
    )  # real: tasks x group size
    assert Trajectory.objects.filter(run=run).count() == 5 * per_step_trajectories


def test_the_backfill_endpoint_serves_what_a_late_client_missed(
    owner, tiny_config, procs
):
    client = client_for(owner)
    run_id = launch(client, tiny_config)
    procs.worker(RUN_TRAINER=TRAINERS["fake"])
    wait_for(
        lambda: Run.objects.get(pk=run_id).status == "succeeded",
        120,
        message="the run to finish",
    )
    body = client.get(f"/api/runs/{run_id}/backfill", {"since_step": 2}).json()
    assert [s["step"] for s in body["steps"]] == [3, 4, 5] and body[
        "status"
    ] == "succeeded"
