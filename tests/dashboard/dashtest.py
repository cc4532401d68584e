"""Helpers for the platform's service tests: subprocess workers/servers, polling."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY = sys.executable


def client_for(user):
    """A test client logged in as ``user`` (anonymous for None)."""
    from django.test import Client

    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def trackio_bulk_log(token: str, logs: list[dict]) -> dict:
    """``logs`` posted to ``/trackio/api/bulk_log`` as trackio's client posts them;
    its answer, asserted to carry no error."""
    import json

    from django.test import Client

    answer = Client().post(
        "/trackio/api/bulk_log",
        json.dumps({"args": [], "kwargs": {"logs": logs}}),
        content_type="application/json",
        headers={"X-Trackio-Write-Token": token},
    )
    assert answer.json()["error"] is None, answer.content
    return answer.json()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """DATABASE_URL of pytest-django's test database (what subprocesses must use)."""
    from django.db import connection

    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


test_database_url.__test__ = False  # not a test, despite the name


def service_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": test_database_url(),
            "DASHBOARD_NAMESPACE": settings.NAMESPACE,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
            "RUN_HEARTBEAT_SECONDS": "1",
            "RUNS_DIR": str(settings.RUNS_DIR),
            "DB_CONN_MAX_AGE": "0",
        }
    )
    env.update(extra)
    return env


def embedded_env(var: Path, **extra: str) -> dict[str, str]:
    """The environment of an embedded server (SQLite under ``var``, no Redis)."""
    env = {
        k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}
    }
    env.update({"DASHBOARD_VAR_DIR": str(var), "ALLOWED_HOSTS": "127.0.0.1"})
    env.update(extra)
    return env


@contextlib.contextmanager
def embedded_daphne(env: dict[str, str]):
    """A real Daphne serving ``dashboard.asgi`` with ``env``: ``(port, psutil
    process)``, killed on exit."""
    import psutil

    port = free_port()
    cmd = [PY, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(
        [*cmd, "dashboard.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("daphne did not start")
        yield port, psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait()


class Procs:
    """Subprocesses started by a test; all killed (group-wide) at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(
        self, args: list[str], env: dict[str, str], name: str
    ) -> subprocess.Popen:
        log = self.tmp_path / f"{name}-{len(self.procs)}.log"
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((proc, log))
        return proc

    def worker(self, **env: str) -> subprocess.Popen:
        ns = settings.NAMESPACE
        args = [
            PY,
            "-m",
            "celery",
            "-A",
            "dashboard",
            "worker",
            "-Q",
            f"{ns}cpu,{ns}gpu",
            "-c",
            "1",
            "--pool=prefork",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "info",
            "-n",
            f"w{len(self.procs)}-{os.getpid()}@%h",
        ]
        return self.start(args, service_env(**env), "worker")

    def daphne(self, port: int | None = None, **env: str) -> str:
        port = port or free_port()
        self.start(
            [
                PY,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "dashboard.asgi:application",
            ],
            service_env(**env),
            "daphne",
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return f"127.0.0.1:{port}"
            time.sleep(0.2)
        raise RuntimeError("daphne did not start:\n" + self.logs())

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}"
            for _, log in self.procs
        )

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def close(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    self.kill(proc)


def wait_for(
    predicate, timeout: float, interval: float = 0.2, message: str = "condition"
):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


class PrivateRedis:
    """A ``redis-server`` of a test's own on a free port, without persistence, that
    the test may stop and start again (on the same port) without disturbing anyone."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self.pings, 10, message="redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pings(self) -> bool:
        import redis

        try:
            return redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping()
        except Exception:
            return False


def populate(run, steps, seed: int = 3) -> None:
    """Write the fake runner's events for ``steps`` straight into the tables."""
    from fake_runner import events_for_step

    from dashboard.ingest import writer
    from dashboard.models import Checkpoint, Run

    batch = writer.Batch()
    for step in steps:
        for event in events_for_step(seed, step):
            batch.add(run.id, event)
    writer.write(run.id, batch)
    Checkpoint.objects.create(run=run, step=max(steps), path="/x", attempt=1)
    Run.objects.filter(pk=run.pk).update(last_step=max(steps))


def execute_in_thread(run) -> threading.Thread:
    """``run`` executed as a worker would (``jobs.execute_run``), in a thread of its
    own with its own database connection, started."""
    from django.db import connection

    from dashboard.runs.jobs import execute_run

    def work():
        try:
            execute_run.run(str(run.id))
        finally:
            connection.close()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    return worker


def form_body(values: dict) -> dict[str, list[str]]:
    """The run form's POST body for ``values`` (``forms.values_from_config``): every
    detector on, lists as repeated fields, a checked box "on", unset fields left out."""
    from rewards.config import DETECTOR_NAMES

    values = {**values, "reward.detectors.enabled": list(DETECTOR_NAMES)}
    return {
        k: [str(x) for x in v]
        if isinstance(v, list)
        else ["on" if v is True else str(v)]
        for k, v in values.items()
        if v is not None and v is not False
    }
