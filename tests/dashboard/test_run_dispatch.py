"""A launch does not depend on the broker being up at that second (issue 21, item 8):
the run is committed queued and answered at once; a task that could not be sent is
sent by the reaper's next pass once the broker answers, not 15 minutes later."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from dashtest import client_for
from django.db import connection
from kombu.exceptions import OperationalError

from dashboard.models import Run
from dashboard.runs import lease, services
from dashboard.runs.jobs import execute_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def celery_path(settings):
    settings.RUN_EXECUTOR = "celery"
    settings.RUN_SUBMIT = "dashboard.runs.jobs.submit"
    return settings


class Broker:
    """``execute_run.apply_async`` as a broker that is down until ``up`` is set."""

    def __init__(self) -> None:
        self.up = False
        self.tries = 0
        self.sent: list[str] = []

    def apply_async(self, args, queue):
        self.tries += 1
        if not self.up:
            raise OperationalError("Error 111 connecting to redis")
        self.sent.append(args[0])


@pytest.fixture
def broker(monkeypatch):
    b = Broker()
    monkeypatch.setattr(execute_run, "apply_async", b.apply_async)
    return b


def test_the_reaper_sends_unsent_runs_in_order_and_stops_at_a_refusal(
    owner, tiny_config, commit, celery_path, broker
):
    runs = []
    for _ in range(3):
        with commit():
            runs.append(services.launch_run(owner, tiny_config))
    assert broker.tries == 3 and broker.sent == []
    assert [r.enqueued_at for r in Run.objects.order_by("created_at")] == [None] * 3

    with commit():
        assert lease.reap() == []
    assert broker.tries == 4  # one try: the broker is still away, no use asking thrice

    broker.up = True
    with commit():
        assert lease.reap() == [r.id for r in runs]
    assert broker.sent == [str(r.id) for r in runs]
    assert Run.objects.filter(enqueued_at__isnull=True).count() == 0


def test_a_run_claimed_or_cancelled_meanwhile_is_not_sent(
    owner, tiny_config, commit, celery_path, broker
):
    with commit():
        run = services.launch_run(owner, tiny_config)
    with commit():
        services.do_cancel_run(run)
    broker.up = True
    with commit():
        assert lease.reap() == []
    assert broker.sent == []


@pytest.fixture
def silent_broker():
    """A TCP server that accepts connections and never answers (a broker on a dead
    host behind a proxy, a stuck Redis): the case where a publish used to hang."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.django_db(transaction=True)  # the request runs in a thread of its own
def test_a_launch_is_answered_at_once_when_the_broker_never_answers(
    owner, tiny_config, celery_path, silent_broker, monkeypatch
):
    from celery import Celery

    # The project's Celery settings, with the silent server as the broker.
    app = Celery("silent", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = silent_broker
    monkeypatch.setattr(
        execute_run,
        "apply_async",
        lambda args, queue: app.send_task(execute_run.name, args=args, queue=queue),
    )
    client, answer = client_for(owner), {}

    def post() -> None:
        started = time.monotonic()
        try:
            r = client.post(
                "/api/runs",
                json.dumps({"config": tiny_config}),
                content_type="application/json",
            )
            answer.update(
                code=r.status_code, body=r.json(), took=time.monotonic() - started
            )
        finally:
            connection.close()  # this thread's own

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the launch request hangs on a silent broker"
    assert answer["code"] == 201 and answer["body"]["status"] == "queued"
    assert answer["took"] < 20, answer["took"]
    run = Run.objects.get(pk=answer["body"]["id"])
    assert run.status == "queued" and run.enqueued_at is None  # for the reaper
    app.close()
