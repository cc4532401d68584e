"""A fake dashboard for client tests: the ingest protocol of ``/work``'s server side
(create run, post NDJSON events, finish, reopen) on stdlib ``http.server`` in a thread.

Events are keyed as the real server keys them and stored once each, in order of first
arrival: a ``step`` event by (step, metric name) for each of its metrics, so a second
event for a step with other metrics is stored too, and one whose every metric is
already stored is a duplicate. It can be told to answer with an error (``fail(503, times=2)``), to refuse
batches over ``max_lines`` with 413 (and new events for a finished run with 409), and be stopped and restarted on the same port
(the store survives: a restart is the same dashboard coming back).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "test-token"


FINISHED = ("succeeded", "failed", "cancelled")


def event_keys(event: dict[str, Any]) -> set[tuple]:
    """The stored keys an event writes (a step's metric points, else one key)."""
    if event.get("type") == "step" and event.get("metrics"):
        return {("step", event["step"], name) for name in event["metrics"]}
    return {event_key(event)}


def event_key(event: dict[str, Any]) -> tuple:
    kind = event.get("type")
    if kind == "step":
        return (kind, event["step"])
    if kind in ("trajectory", "critical_path"):
        return (kind, event["step"], event["group"], event["index"])
    if kind == "judgement":
        return (kind, event["step"], event["group"], event["index"], event["judge"])
    if kind == "alert":
        return (kind, event["step"], event["detector"], event["message"])
    if kind == "checkpoint":
        return (kind, event["step"])
    if kind == "run_started":
        return (kind, event.get("start_step"))
    if kind == "run_finished":
        return (kind,)
    return (kind, json.dumps(event, sort_keys=True))


def check_line(number: int, event: Any) -> str | None:
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return f"line {number}: type: Field required"
    step = event.get("step", 0)
    if not isinstance(step, int) or isinstance(step, bool):
        return f"line {number}: step: Input should be a valid integer"
    return None


class Store:
    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, int, int]] = []  # (path, lines, status)
        self.reopened: list[str] = []  # the ids POSTed to /reopen
        self.lock = threading.Lock()

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        run_id = str(uuid.uuid4())
        run = {
            "id": run_id,
            "name": body.get("name"),
            "framework": body.get("framework"),
            "config": body.get("config"),
            "status": "running",
            "error": None,
        }
        self.runs[run_id] = {**run, "events": [], "keys": set()}
        return run

    def events(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.runs[run_id]["events"])


class FakeDashboard:
    def __init__(self) -> None:
        self.store = Store()
        self.failures: list[
            int
        ] = []  # statuses to answer, one per request, first first
        self.fail_forever: int | None = None
        self.max_lines = 5000
        self.port = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeDashboard:
        handler = type("Handler", (_Handler,), {"dash": self})
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def fail(self, status: int, times: int | None = 1) -> None:
        if times is None:
            self.fail_forever = status
        else:
            self.failures.extend([status] * times)

    def heal(self) -> None:
        self.failures.clear()
        self.fail_forever = None

    def only_run(self) -> dict[str, Any]:
        (run,) = self.store.runs.values()
        return run

    def events(self) -> list[dict[str, Any]]:
        return self.store.events(self.only_run()["id"])


class _Handler(BaseHTTPRequestHandler):
    dash: FakeDashboard
    # HTTP/1.0: one request per connection, so a stopped server answers nothing more
    # (a kept-alive connection would outlive ``shutdown``).
    protocol_version = "HTTP/1.0"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        dash = self.dash
        with dash.store.lock:
            status, body, lines = self._answer(raw)
            dash.store.requests.append((self.path, lines, status))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, raw: bytes) -> tuple[int, dict[str, Any], int]:
        dash = self.dash
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, {"detail": "Invalid token."}, 0
        if dash.failures or dash.fail_forever:
            status = dash.failures.pop(0) if dash.failures else dash.fail_forever
            return status, {"detail": f"told to fail with {status}"}, 0
        if self.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        parts = self.path.strip("/").split("/")
        if parts == ["api", "runs", "external"]:
            return 201, dash.store.create(json.loads(raw)), 0
        if len(parts) == 4 and parts[:2] == ["api", "runs"]:
            run = dash.store.runs.get(parts[2])
            if run is None:
                return 404, {"detail": "Not found."}, 0
            if parts[3] == "events":
                return self._events(run, raw)
            if parts[3] == "finish":
                body = json.loads(raw)
                run.update(status=body["status"], error=body.get("error"))
                return 200, {k: run[k] for k in ("id", "name", "status")}, 0
            if parts[3] == "reopen":
                dash.store.reopened.append(run["id"])
                if run["status"] in FINISHED:
                    run["status"] = "running"
                return 200, {k: run[k] for k in ("id", "name", "status")}, 0
        return 404, {"detail": "Not found."}, 0

    def _events(self, run: dict[str, Any], raw: bytes) -> tuple[int, dict, int]:
        lines = [x for x in raw.decode("utf-8").split("\n") if x.strip()]
        if len(lines) > self.dash.max_lines:
            return 413, {"detail": f"at most {self.dash.max_lines} lines"}, len(lines)
        events, errors = [], []
        for number, line in enumerate(lines, start=1):
            try:
                event = json.loads(line)
            except ValueError:
                errors.append(f"line {number}: not JSON")
                continue
            problem = check_line(number, event)
            if problem:
                errors.append(problem)
            events.append(event)
        if errors:
            return 400, {"detail": "invalid events", "errors": errors}, len(lines)
        fresh = [e for e in events if event_keys(e) - run["keys"]]
        if run["status"] in FINISHED and fresh:
            return 409, {"detail": "run: finished; reopen it"}, len(lines)
        accepted = duplicates = 0
        for event in events:
            keys = event_keys(event)
            if keys <= run["keys"]:
                duplicates += 1
                continue
            run["keys"] |= keys
            run["events"].append(event)
            accepted += 1
            if event["type"] == "run_finished":
                run["status"] = event["status"]
        return 200, {"accepted": accepted, "duplicates": duplicates}, len(lines)


def wait_until(predicate, what: str, limit: float = 60.0, every: float = 0.02) -> None:
    """Polls a condition the test needs before it goes on (not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(every)
