"""The embedded default end to end: ``manage.py serve --demo`` on SQLite with no
Redis, log in as the demo user, and watch the demo run stream over the websocket.

The first step may take minutes on a slow or busy machine (it failed a fixed 240 s
deadline at load 7 on 2 cores), so the test waits on progress instead of a clock: it
fails when the server dies, the run ends or leaves queued/running, its state (status,
heartbeat, last step) stops changing for :data:`STALL_S`, or the server spends
:data:`CPU_BUDGET_S` of CPU time without a step (CPU seconds, not wall seconds, do not
grow with the machine's load)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
STALL_S = 120  # the sink heartbeats every 5 s (RUN_HEARTBEAT_SECONDS) while a run lives
# The first demo step (after its 300 warm-start steps) once cost the server ~370 CPU s
# on the 2-core VM (16 min of wall time at load 8); now ~40 CPU s alone (~25 s wall),
# but spinning threads beside other processes multiply it: a wide margin, whatever the load.
CPU_BUDGET_S = 1500


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(DASHBOARD_VAR_DIR=str(tmp_path / "var"), DASHBOARD_NAMESPACE="smoke.")
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port), "--demo"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("server did not start:\n" + log.read_text())
    yield base, log, proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def _frames_until_a_step(ws, http: httpx.Client, run_id: str, proc) -> list[dict]:
    """Frames until one carries a step, while the run shows it is alive and moving."""
    server, frames = psutil.Process(proc.pid), []
    cpu0, state, moved = _cpu_s(server), None, time.monotonic()
    while not any(f["steps"] for f in frames):
        used = _cpu_s(server) - cpu0
        assert used < CPU_BUDGET_S, f"{used:.0f} CPU s and no step yet"
        try:
            frames.append(json.loads(ws.recv(timeout=5)))
            continue
        except TimeoutError:
            pass
        assert proc.poll() is None, "the server died"
        run = http.get(f"/api/runs/{run_id}").json()
        assert run["status"] in {"queued", "running"}, run
        now = (run["status"], run["heartbeat_at"], run["last_step"])
        if now != state:
            state, moved = now, time.monotonic()
        assert time.monotonic() - moved < STALL_S, f"the run stopped moving: {run}"
    return frames


def test_make_run_serves_the_demo_run_and_streams_it(server):
    from websockets.sync.client import connect

    base, log, proc = server
    out = log.read_text()
    username, password = re.search(r"username=(\S+) password=(\S+)", out).groups()
    # Two demos: calc (learns in minutes) runs first, a long swarm run after it, so
    # something is still training live when a newcomer logs in.
    demo_ids = re.findall(r"demo run: (\S+)", out)
    assert len(demo_ids) == 2
    run_id = demo_ids[0]

    with httpx.Client(base_url=base, follow_redirects=False) as http:
        http.get("/accounts/login/")
        r = http.post(
            "/accounts/login/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
            },
            headers={"Referer": f"{base}/accounts/login/"},
        )
        assert r.status_code == 302, r.text[:500]
        runs = http.get("/api/runs").json()["runs"]
        assert sorted(x["id"] for x in runs) == sorted(demo_ids)
        home = http.get("/").text  # leads to the demo training now (or next)
        assert "data-live-banner" in home and f"/runs/{run_id}/" in home
        session = http.cookies["sessionid"]

        ws_url = base.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
        headers = {"Cookie": f"sessionid={session}", "Origin": base}
        with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
            hello = json.loads(ws.recv(timeout=10))
            assert hello["type"] == "hello" and hello["run"] == run_id
            frames = _frames_until_a_step(ws, http, run_id, proc)
    seqs = [f["seq"] for f in frames]
    # A frame published while the socket was joining comes right after the hello
    # and may be numbered at or below it.
    assert seqs == sorted(seqs) and seqs[-1] > hello["frame_seq"]
    step = next(f for f in frames if f["steps"])["steps"][0]
    assert "reward" in step["metrics"]
