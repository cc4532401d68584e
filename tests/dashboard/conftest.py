"""Fixtures for the platform tests: users and clients, a tiny config, and (for tests
marked ``services``) a real Celery worker and a real Daphne server pointed at
pytest-django's test database.

``services`` tests need ``DATABASE_URL`` to be PostgreSQL and ``REDIS_URL`` to answer;
otherwise they are skipped with the reason. Queues and channel groups are namespaced
per test session (``settings.NAMESPACE``) so parallel sessions sharing one Redis do
not steal each other's tasks.
"""

from __future__ import annotations

import os
import shutil

import pytest
from dashtest import (
    PrivateRedis,
    Procs,
    client_for,
    embedded_daphne,
    embedded_env,
    populate,
)


# --- users and clients ------------------------------------------------------------------
@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner", password="pw-owner-123")


@pytest.fixture
def other(django_user_model):
    return django_user_model.objects.create_user("other", password="pw-other-123")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(
        "staff", password="pw-staff-123", is_staff=True
    )


@pytest.fixture
def owner_client(owner):
    return client_for(owner)


@pytest.fixture
def tiny_config() -> dict:
    """A config the real trainer runs in about a second on CPU."""
    return {
        "name": "tiny",
        "seed": 3,
        "steps": 5,
        "model": {"size": "tiny", "device": "cpu"},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        "checkpoint": {"every": 2},
    }


@pytest.fixture
def fake_runner(settings, monkeypatch, tmp_path):
    """Route in-process execution to tests/dashboard/fake_runner.py."""
    settings.RUN_TRAINER = "fake_runner.run_from_config"
    settings.RUNS_DIR = tmp_path / "runs"
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0")
    import fake_runner

    return fake_runner


# --- services -----------------------------------------------------------------------------
def _services_reason() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return "needs DATABASE_URL=postgres://... (embedded SQLite run)"
    if not os.environ.get("REDIS_URL"):
        return "needs REDIS_URL"
    try:
        import redis

        redis.Redis.from_url(os.environ["REDIS_URL"], socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"Redis at REDIS_URL is not answering: {exc!r}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _services_reason()
    if reason is None:
        return
    for item in items:
        if "services" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def procs(tmp_path, settings, request):
    """Start workers/servers against the test database; dumps their logs on failure."""
    settings.RUNS_DIR = tmp_path / "runs"
    p = Procs(tmp_path)
    yield p
    p.close()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(p.logs())


@pytest.fixture
def private_redis():
    """A Redis of our own (:class:`dashtest.PrivateRedis`), so stopping it disturbs
    no one else."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    server = PrivateRedis()
    server.start()
    yield server
    server.stop()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def enqueued(monkeypatch):
    """Record what would be handed to an executor instead of running it."""
    from dashboard.runs import lease

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(
        lease, "enqueue", lambda run_id, queue: calls.append((str(run_id), queue))
    )
    return calls


@pytest.fixture
def published(monkeypatch):
    """Record frames instead of sending them to the channel layer."""
    import json

    from dashboard.live import streaming

    frames: list[dict] = []

    def publish(run_id, text):
        frames.append(json.loads(text))
        return True

    monkeypatch.setattr(streaming, "publish", publish)
    return frames


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """``with commit(): ...`` runs the block's on_commit callbacks at its end, as a
    real commit would (tests run inside a transaction that never commits)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def run(owner, tiny_config, enqueued):
    """A run of ``owner`` with 6 steps of events, marked running."""
    from dashboard.models import Run
    from dashboard.runs import services

    r = services.launch_run(owner, tiny_config)
    Run.objects.filter(pk=r.pk).update(status="running")
    populate(r, range(1, 7))
    r.refresh_from_db()
    return r


# --- a real Daphne server --------------------------------------------------------------
@pytest.fixture(scope="module")
def daphne(tmp_path_factory):
    """A real Daphne serving ``dashboard.asgi`` on the embedded default (its own var/,
    no DATABASE_URL or REDIS_URL): (port, its psutil.Process)."""
    env = embedded_env(tmp_path_factory.mktemp("var"), REQUEST_BODY_TIMEOUT_S="2")
    with embedded_daphne(env) as server:
        yield server


@pytest.fixture
def bulk_log(owner):
    """Calls /trackio/api/<name> (``bulk_log`` by default) as trackio's client does,
    with a write token of ``owner``; the answer's JSON (always a 200)."""
    import json

    from django.test import Client

    from dashboard.site import tokens

    token = tokens.do_create_token(owner, "trackio")[1]
    client = Client(enforce_csrf_checks=True)

    def _call(*logs, name="bulk_log", key="logs"):
        body = json.dumps({"args": [], "kwargs": {key: list(logs)}})
        answer = client.post(
            f"/trackio/api/{name}",
            body,
            content_type="application/json",
            headers={"X-Trackio-Write-Token": token},
        )
        assert answer.status_code == 200, answer.content
        return answer.json()

    return _call


@pytest.fixture
def data_root(tmp_path, settings):
    """An empty data root (``DATA_ROOTS``) under the test's directory, which is the
    model root too: where the datasets page saves uploads."""
    root = tmp_path / "data"
    root.mkdir()
    settings.DATA_ROOTS, settings.MODEL_ROOTS = [root], [tmp_path]
    return root
