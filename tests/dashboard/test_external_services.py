"""External runs on the production path: token-authenticated HTTP to Daphne ->
PostgreSQL -> frames over the Redis channel layer to a websocket client."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
from dashtest import client_for
from fake_runner import events_for_step
from websockets.sync.client import connect

from dashboard.models import MetricPoint, Run, Trajectory
from dashboard.site import tokens

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


def ndjson(events) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


def test_a_token_client_streams_an_external_run_into_a_live_page(owner, other, procs):
    server = procs.daphne()
    token = tokens.do_create_token(owner, "ci")[1]
    http = httpx.Client(
        base_url=f"http://{server}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    r = http.post(
        "/api/runs/external",
        json={"name": "trl-run", "framework": "trl", "config": {"beta": 0.0}},
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]

    browser = client_for(owner)
    headers = {
        "Cookie": f"sessionid={browser.cookies['sessionid'].value}",
        "Origin": f"http://{server}",
    }
    with connect(
        f"ws://{server}/ws/runs/{run_id}/", additional_headers=headers, open_timeout=15
    ) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["status"] == "running"
        frames = []
        for step in (1, 2, 3):
            body = gzip.compress(ndjson(events_for_step(3, step)))
            r = http.post(
                f"/api/runs/{run_id}/events",
                content=body,
                headers={
                    "Content-Type": "application/x-ndjson",
                    "Content-Encoding": "gzip",
                },
            )
            assert r.status_code == 200, r.text
            assert r.json()["duplicates"] == 0
            frames.append(json.loads(ws.recv(timeout=10)))
        assert [s["step"] for f in frames for s in f["steps"]] == [1, 2, 3]
        assert all(f["trajectories"] for f in frames)

        resent = http.post(
            f"/api/runs/{run_id}/events", content=ndjson(events_for_step(3, 2))
        )
        assert resent.json()["accepted"] == 0
        bad = http.post(
            f"/api/runs/{run_id}/events",
            content=ndjson(events_for_step(3, 4)) + b'{"type": "step"}\n',
        )
        assert bad.status_code == 400
        assert bad.json()["errors"][0].startswith(
            f"line {len(events_for_step(3, 4)) + 1}: step"
        )
        done = http.post(f"/api/runs/{run_id}/finish", json={"status": "succeeded"})
        assert done.status_code == 200
        final = json.loads(ws.recv(timeout=10))  # a resend is not news: no frame
        assert final["status"] == "succeeded" and final["steps"] == []

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.last_step, run.external) == ("succeeded", 3, True)
    assert Trajectory.objects.filter(run=run).count() == 6
    assert not MetricPoint.objects.filter(run=run, step=4).exists()

    theirs = tokens.do_create_token(other, "x")[1]
    r = httpx.get(
        f"http://{server}/api/runs/{run_id}",
        headers={"Authorization": f"Bearer {theirs}"},
    )
    assert r.status_code == 404
    tokens.do_revoke_token(owner, tokens.tokens_of(owner)[0].pk)
    assert http.get("/api/runs").status_code == 401


def _stored_like_jsonl(run, events):
    """The run's rows equal what ``events.jsonl`` says, each once."""
    import math

    expected_points = {
        (e["step"], k): v
        for e in events
        if e["type"] == "step"
        for k, v in e["metrics"].items()
    }
    stored = {(p.step, p.key): p.value for p in MetricPoint.objects.filter(run=run)}
    assert stored.keys() == expected_points.keys()
    for key, value in expected_points.items():
        got = stored[key]
        if isinstance(value, str) or value is None:
            assert got is None or math.isnan(got)
        else:
            assert got == pytest.approx(value, rel=1e-12, abs=1e-12)
    trajs = {
        (e["step"], e["group"], e["index"]): e
        for e in events
        if e["type"] == "trajectory"
    }
    rows = list(Trajectory.objects.filter(run=run))
    assert len(rows) == len(trajs)
    for row in rows:
        e = trajs[(row.step, row.group, row.index)]
        assert (row.task_id, row.length) == (e["task_id"], e["length"])


def test_a_cli_run_survives_the_dashboard_being_killed_and_restarted(
    owner, procs, tmp_path
):
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml
    from dashtest import ROOT, free_port, wait_for

    port = free_port()
    server = procs.daphne(port=port)
    token = tokens.do_create_token(owner, "cli")[1]
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "streamed",
                "seed": 3,
                "steps": 14,
                "model": {"size": "tiny", "device": "cpu"},
                "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
                "checkpoint": {"every": 5},
            }
        )
    )
    out = tmp_path / "out"
    env = dict(os.environ, DASHBOARD_TOKEN=token, PYTHONPATH=str(ROOT))
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer", "run", str(cfg), "--out", str(out),
         "--report-to", f"http://{server}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        run = wait_for(
            lambda: Run.objects.filter(owner=owner, name="streamed").first(),
            timeout=120,
            message="the external run",
        )
        wait_for(
            lambda: MetricPoint.objects.filter(run=run, step__gte=2).exists(),
            timeout=180,
            message="step 2 stored",
        )
        daphne = procs.procs[0][0]
        procs.kill(daphne, signal.SIGKILL)  # the dashboard dies mid-run
        time.sleep(3)
        procs.daphne(port=port)  # and comes back on the same address
        output, _ = trainer.communicate(timeout=600)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
    assert trainer.returncode == 0, output.decode(errors="replace")[-3000:]
    events = [
        json.loads(line)
        for line in (out / "events.jsonl").read_text().splitlines()
        if line.strip()
    ]
    run.refresh_from_db()
    assert run.status == "succeeded" and run.last_step == 14
    _stored_like_jsonl(run, events)


def test_a_trl_grpo_run_appears_with_metrics_and_reward_columns(owner, procs, tmp_path):
    import importlib.util
    import sys

    if importlib.util.find_spec("trl") is None:
        pytest.skip("trl not installed (pip install -r requirements-bench.txt)")
    from dashtest import ROOT

    sys.path.insert(0, str(ROOT / "tests" / "trainer"))
    from test_trl_callback import grpo_trainer, train

    from trainer.integrations.trl import DashboardCallback

    server = procs.daphne()
    token = tokens.do_create_token(owner, "trl")[1]
    callback = DashboardCallback(f"http://{server}", token, name="trl-tiny")
    train(grpo_trainer(callback, str(tmp_path / "trl-out")))
    run = Run.objects.get(owner=owner, name="trl-tiny")
    assert (run.status, run.framework, run.last_step) == ("succeeded", "trl", 3)
    keys = set(MetricPoint.objects.filter(run=run).values_list("key", flat=True))
    assert {"reward", "rewards/says_answer/mean", "rewards/is_short/mean"} <= keys
    trajs = list(Trajectory.objects.filter(run=run, step=1).order_by("group", "index"))
    assert len(trajs) == 4
    assert set(trajs[0].rewards["components"]) == {"says_answer", "is_short"}
    browser = client_for(owner)
    page = browser.get(f"/runs/{run.pk}/trajectories/1/0/0/")
    assert page.status_code == 200 and b"says_answer" in page.content


def test_a_prime_rl_run_directory_imports_with_its_token_arrays(owner, procs, tmp_path):
    """``--from prime-rl`` against the real server: the per-token arrays come back
    from the API (packed float32), and the run page charts staleness and mismatch."""
    from tests.fixtures import layouts
    from trainer.cli import main

    server = procs.daphne()
    token = tokens.do_create_token(owner, "prime")[1]
    run_dir = tmp_path / "prime"
    layouts.prime_run(run_dir, step=1)
    layouts.prime_metrics(
        run_dir, [{"step": 1, "mismatch_kl/all/mean": 0.01, "off_policy/mean": 1.5}]
    )
    args = ["import", "--from", "prime-rl", str(run_dir), "--name", "prime"]
    import os

    os.environ["DASHBOARD_TOKEN"] = token
    try:
        assert main([*args, "--report-to", f"http://{server}"]) == 0
    finally:
        del os.environ["DASHBOARD_TOKEN"]
    run = Run.objects.get(owner=owner, name="prime")
    assert (run.status, run.framework) == ("succeeded", "prime-rl")
    assert Trajectory.objects.filter(run=run, step=1).count() == 3
    browser = client_for(owner)
    detail = browser.get(f"/api/runs/{run.pk}/trajectories/1/0/0").json()
    action = detail["segments"][-1]
    assert action["token_ids"] == [4, 5]
    assert action["logprob"] == [-0.25, -0.75] and action["ratio"] == [1.25, 0.75]
    assert action["old_logprob"] == [-0.5, -0.5] and action["entropy"] == [1.5, 0.5]
    page = browser.get(f"/runs/{run.pk}/").context["page_data"]["charts"]
    by_id = {c["id"]: c["keys"] for c in page}
    assert by_id["mismatch"] == ["mismatch/kl"]
    assert by_id["staleness"] == ["off_policy/mean", "off_policy/staleness"]
