"""The Redis outage test (issue 21, item 8): Redis is stopped for 15 s in the middle of
a run and started again, empty (no persistence), on the same port. A viewer that stayed
connected sees frames again and the final status, without having to reconnect; a run
launched during the outage is answered at once (queued) and executed once Redis is back,
not after ``RUN_RESEND_QUEUED_SECONDS`` (15 minutes).

Everything is real: Daphne, a Celery worker (prefork), the reaper, PostgreSQL and a
private ``redis-server`` (the shared one is never touched)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
from dashtest import PY, client_for, service_env, wait_for
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from dashboard.models import Run
from dashboard.site import tokens

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

OUTAGE_S = 15


def launch(server: str, token: str, config: dict) -> tuple[dict, float]:
    """POST /api/runs on the server; the answer and how long it took."""
    request = urllib.request.Request(
        f"http://{server}/api/runs",
        data=json.dumps({"config": config}).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 201
        body = json.loads(response.read())
    return body, time.monotonic() - started


class Viewer:
    """One websocket to a run page's feed, read in a thread: every message, in order,
    and whether (and how) the socket was closed."""

    def __init__(self, server: str, client, run_id: str) -> None:
        self.url = f"ws://{server}/ws/runs/{run_id}/"
        self.headers = {
            "Cookie": f"sessionid={client.cookies['sessionid'].value}",
            "Origin": f"http://{server}",
        }
        self.messages: list[dict] = []
        self.since = 0
        self.outage = 0
        self.closed: str | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> Viewer:
        self.thread.start()
        wait_for(lambda: self.messages or self.closed, 30, message="the hello")
        assert self.closed is None and self.messages[0]["type"] == "hello"
        return self

    def _read(self) -> None:
        with connect(self.url, additional_headers=self.headers, open_timeout=15) as ws:
            while not self.stop.is_set():
                try:
                    self.messages.append(json.loads(ws.recv(timeout=0.5)))
                except TimeoutError:
                    continue
                except ConnectionClosed as exc:
                    self.closed = repr(exc)
                    return

    def last_step(self) -> int:
        steps = [m.get("last_step") or 0 for m in self.messages]
        return max(steps, default=0)

    def statuses(self, since: int = 0) -> list[str]:
        return [m.get("status") for m in self.messages[since:]]

    def mark(self) -> None:
        """Remember where the messages stand (when Redis is started again)."""
        self.since = len(self.messages)

    def mark_outage(self) -> None:
        """Remember where the messages stand when Redis is stopped."""
        self.outage = len(self.messages)

    def after_mark(self) -> list[dict]:
        return self.messages[self.since :]

    def ended(self) -> bool:
        """The final status arrived since Redis was stopped (a hub that noticed the
        broken layer may send it from the database while Redis is still down), or the
        socket was closed."""
        return "succeeded" in self.statuses(self.outage) or self.closed is not None


def test_viewers_and_a_launch_survive_a_redis_outage(
    owner, tiny_config, procs, private_redis
):
    env = {
        "REDIS_URL": private_redis.url,
        "RUN_TRAINER": "fake_runner.run_from_config",
        "FAKE_RUNNER_STEP_S": "0.5",
    }
    server = procs.daphne(**env)
    procs.worker(**env)
    procs.worker(**env)
    reaper = [PY, "manage.py", "reap_runs", "--interval", "1"]
    procs.start(reaper, service_env(**env), "reaper")
    _, token = tokens.do_create_token(owner, "outage")
    # Two runs at once, one per worker: the long one outlives the outage, the short
    # one ends during it (its last frames, the final status among them, go nowhere).
    long, _ = launch(server, token, {**tiny_config, "steps": 80})
    short, _ = launch(server, token, {**tiny_config, "steps": 10})
    viewers = {}
    try:
        for run in (long, short):
            viewers[run["id"]] = Viewer(server, client_for(owner), run["id"]).start()
        long_viewer, short_viewer = viewers[long["id"]], viewers[short["id"]]
        wait_for(
            lambda: long_viewer.last_step() >= 3 and short_viewer.last_step() >= 2,
            120,
            message="both runs streaming",
        )

        for viewer in viewers.values():
            viewer.mark_outage()
        private_redis.stop()
        stopped = time.monotonic()
        during, took = launch(server, token, tiny_config)
        assert during["status"] == "queued"
        assert took < 10, f"the launch took {took:.1f} s with Redis down"
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
        assert status(long) == "running" and status(short) == "succeeded"
        private_redis.start()
        for viewer in viewers.values():
            viewer.mark()

        for viewer in viewers.values():
            wait_for(viewer.ended, 180, message="the final status on the socket")
            assert viewer.closed is None, viewer.closed  # the same socket, still open
            assert viewer.statuses()[-1] == "succeeded"
        after = long_viewer.after_mark()
        assert any(m["type"] == "frame" and m["steps"] for m in after), after[:3]
        assert status(long) == "succeeded"
        # Sent once the broker answered (the reaper's pass), not after 15 minutes.
        wait_for(
            lambda: status(during) == "succeeded",
            240,
            message="the run launched during the outage",
        )
    finally:
        for viewer in viewers.values():
            viewer.stop.set()
            viewer.thread.join(10)


def status(run: dict) -> str:
    return Run.objects.get(pk=run["id"]).status
