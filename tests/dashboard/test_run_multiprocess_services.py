"""A run of two processes on the production path (API -> Postgres -> a Celery worker
with two devices -> torchrun -> two gloo ranks), one rank killed with SIGKILL: torchrun
tears the group down, the worker requeues the attempt, the next one resumes from the
run's torch.distributed.checkpoint and the database ends with every row once."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from dashtest import client_for, wait_for

from dashboard.models import Checkpoint, MetricPoint, Run, Trajectory

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


def rank_pid(run_id: str, rank: int) -> int | None:
    """The pid of one rank of a run (torchrun sets RANK in each rank's environment)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"dashboard.runs.rank" not in argv or run_id.encode() not in argv:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def status(run_id: str) -> str:
    return Run.objects.get(pk=run_id).status


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.parametrize("killed", [1, 0])
def test_a_rank_killed_mid_run_is_resumed_from_its_checkpoint_with_every_row_once(
    killed, owner, tiny_config, procs, settings
):
    settings.RUN_MAX_PROCESSES = 2  # the largest worker of this deployment
    steps, tasks, group = 10, 2, 2
    config = {
        **tiny_config,
        "steps": steps,
        "rollout": {**tiny_config["rollout"], "tasks_per_step": tasks},
        "checkpoint": {"every": 2},
        "resources": {"processes": 2},
    }
    r = client_for(owner).post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    assert r.status_code == 201, r.content
    run_id = r.json()["id"]
    assert Run.objects.get(pk=run_id).queue == "cpu-x2"
    procs.worker(WORKER_DEVICES="2")  # consumes cpu-x2 besides cpu and gpu
    wait_for(
        lambda: Run.objects.get(pk=run_id).last_step >= 3,
        120,
        message="step 3 (past checkpoint 2)",
    )
    pid = rank_pid(run_id, killed)
    assert pid is not None, procs.logs()
    os.kill(pid, signal.SIGKILL)
    killed_at = Run.objects.get(pk=run_id).last_step
    assert killed_at < steps

    wait_for(
        lambda: status(run_id) in ("succeeded", "failed", "unresponsive", "cancelled"),
        180,
        message="the resumed run",
    )
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.attempt, run.last_step, run.error) == (
        "succeeded",
        2,
        steps,
        "",
    ), procs.logs()
    first = run.attempts.get(number=1)
    assert first.outcome == "failed"
    assert f"rank {killed} died without a word" in first.message
    assert run.attempts.get(number=2).outcome == "succeeded"

    # Every row once: each step's trajectories (both ranks' groups), the same metric
    # keys on every step after the first, a checkpoint row per checkpoint.
    per_step = sorted(
        Trajectory.objects.filter(run=run).values_list("step", "group", "index")
    )
    assert per_step == [
        (s, g, i)
        for s in range(1, steps + 1)
        for g in range(tasks)
        for i in range(group)
    ]
    keys: dict[int, set[str]] = {}
    for step, key in MetricPoint.objects.filter(run=run).values_list("step", "key"):
        keys.setdefault(step, set()).add(key)
    assert sorted(keys) == list(range(1, steps + 1))
    assert all(keys[s] == keys[2] for s in range(2, steps + 1))
    assert {"reward", "policy_loss", "grad_norm"} <= keys[2]
    assert sorted(
        Checkpoint.objects.filter(run=run).values_list("step", flat=True)
    ) == list(range(2, steps + 1, 2))
