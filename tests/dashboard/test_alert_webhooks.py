"""Alert webhooks: each alert stored for a run is POSTed to its owner's webhook, off
the request path (the events API answers before the receiver does), with a timeout;
a receiver that is down is logged, retried with backoff and the event write still
succeeds; a notification is stored with its alert, so one a stopped process left
unsent is sent by the next; "Send a test" on /settings/. The receiver is a local
HTTP server started here."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.test import Client

from dashboard.ingest import webhooks
from dashboard.models import AccountSettings, Alert, Run, WebhookDelivery
from dashboard.site import tokens
from tests.dashboard.dashtest import free_port, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _receivers_on_this_machine_allowed(settings):
    """The receiver here listens on 127.0.0.1, refused unless the server allows its
    own network (test_webhook_hostile.py tests the refusal)."""
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True


class Receiver:
    """A local HTTP server recording the JSON bodies POSTed to it; ``status`` is what
    it answers, ``hold`` (an Event) keeps it from answering until set."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.status = 204
        self.hold: threading.Event | None = None
        self.got = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                outer.bodies.append(
                    {
                        "path": self.path,
                        "type": self.headers.get("Content-Type"),
                        "json": json.loads(self.rfile.read(n)),
                    }
                )
                outer.got.set()
                if outer.hold is not None:
                    outer.hold.wait(10)
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/rl?key=s3cret"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    webhooks.drain(15)
    r.close()


@pytest.fixture
def api(owner):
    token = tokens.do_create_token(owner, "test")[1]
    client = Client(enforce_csrf_checks=True)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def post(url, body, ndjson=False):
        data = "\n".join(json.dumps(e) for e in body) if ndjson else json.dumps(body)
        kind = "application/x-ndjson" if ndjson else "application/json"
        return client.post(url, data, content_type=kind, **auth)

    return post


def external_run(api, name="<b>hacked</b> & co"):
    r = api("/api/runs/external", {"name": name, "framework": "agentic-rl"})
    assert r.status_code == 201, r.content
    return r.json()["id"]


ALERT = {
    "type": "alert",
    "step": 12,
    "detector": "spurious_parallelism",
    "severity": "critical",
    "message": "spurious parallelism: 4.4 sub-agents per stage, 40% finished",
    "evidence": {"finish_rate_late": 0.4},
    "trajectories": [{"group": 1, "index": 2, "task_id": "t", "why": "4 sub-agents"}],
}


def events(step=12):
    return [
        {"type": "step", "step": step, "metrics": {"reward": 0.5}},
        {**ALERT, "step": step},
    ]


def use_webhook(user, url):
    AccountSettings.objects.update_or_create(user=user, defaults={"webhook_url": url})


def test_each_new_alert_is_posted_to_the_owners_webhook(owner, api, receiver, settings):
    settings.DASHBOARD_URL = "https://rl.example.org"
    use_webhook(owner, receiver.url)
    run_id = external_run(api)
    r = api(f"/api/runs/{run_id}/events", events(), ndjson=True)
    assert r.status_code == 200 and r.json()["accepted"] == 2
    assert webhooks.drain(15)
    [sent] = receiver.bodies
    assert sent["path"] == "/hooks/rl?key=s3cret" and sent["type"] == "application/json"
    base = f"https://rl.example.org/runs/{run_id}/"
    assert sent["json"] == {
        "event": "alert",
        "run": {"id": run_id, "name": "<b>hacked</b> & co", "url": base},
        "step": 12,
        "detector": "spurious_parallelism",
        "severity": "critical",
        "message": ALERT["message"],
        "evidence_url": base + "#alert-spurious_parallelism-12",
        "trajectories": [
            {"group": 1, "index": 2, "why": "4 sub-agents",
             "url": base + "trajectories/12/1/2/"}
        ],
    }  # fmt: skip
    delivered = AccountSettings.objects.get(user=owner).last_delivery
    assert delivered["ok"] is True and delivered["status"] == 204
    assert delivered["detector"] == "spurious_parallelism" and delivered["step"] == 12
    # The same batch again stores nothing new, so nothing is sent again.
    assert api(f"/api/runs/{run_id}/events", events(), ndjson=True).status_code == 200
    assert webhooks.drain(15) and len(receiver.bodies) == 1


def test_the_write_does_not_wait_for_the_receiver(owner, api, receiver):
    use_webhook(owner, receiver.url)
    receiver.hold = threading.Event()  # the receiver does not answer until told
    run_id = external_run(api)
    r = api(f"/api/runs/{run_id}/events", events(), ndjson=True)
    assert r.status_code == 200  # answered while the receiver still holds the POST
    assert receiver.got.wait(10) and not receiver.hold.is_set()
    receiver.hold.set()
    assert webhooks.drain(15)


def test_a_receiver_that_is_down_is_logged_and_the_write_succeeds(owner, api, caplog):
    use_webhook(owner, f"http://127.0.0.1:{free_port()}/down?token=s3cret")
    run_id = external_run(api)
    with caplog.at_level("WARNING", logger="dashboard.ingest.webhooks"):
        r = api(f"/api/runs/{run_id}/events", events(), ndjson=True)
        assert r.status_code == 200 and r.json()["accepted"] == 2
        assert webhooks.drain(15)
    assert Alert.objects.filter(run_id=run_id, detector="spurious_parallelism").exists()
    failed = [m for m in caplog.messages if "alert webhook to" in m and "failed" in m]
    assert failed and "s3cret" not in failed[0]  # the query is not logged
    delivered = AccountSettings.objects.get(user=owner).last_delivery
    assert delivered["ok"] is False and delivered["error"] and delivered["retry_at"]
    [d] = WebhookDelivery.objects.all()  # kept for its next try, 10 s on
    assert (d.status, d.attempts) == ("pending", 1)
    assert 9 <= (d.next_at - d.created_at).total_seconds() <= 12


def test_a_receiver_answering_500_is_logged(owner, api, receiver, caplog):
    use_webhook(owner, receiver.url)
    receiver.status = 500
    run_id = external_run(api)
    with caplog.at_level("WARNING", logger="dashboard.ingest.webhooks"):
        assert (
            api(f"/api/runs/{run_id}/events", events(), ndjson=True).status_code == 200
        )
        assert webhooks.drain(15)
    assert len(receiver.bodies) == 1
    assert any("answered 500" in m for m in caplog.messages)
    assert AccountSettings.objects.get(user=owner).last_delivery["status"] == 500
    assert WebhookDelivery.objects.get().status == "pending"  # a 5xx is retried


def test_a_slow_receiver_times_out(owner, api, receiver, settings, caplog):
    settings.ALERT_WEBHOOK_TIMEOUT_S = 1
    use_webhook(owner, receiver.url)
    receiver.hold = threading.Event()
    run_id = external_run(api)
    with caplog.at_level("WARNING", logger="dashboard.ingest.webhooks"):
        assert (
            api(f"/api/runs/{run_id}/events", events(), ndjson=True).status_code == 200
        )
        assert webhooks.drain(15)  # gave up after its timeout, not the receiver's 10 s
    assert any("timed out" in m for m in caplog.messages), caplog.messages
    receiver.hold.set()


def test_only_the_owners_webhook_hears_of_the_run(owner, other, api, receiver):
    use_webhook(other, receiver.url)  # another user's webhook
    run_id = external_run(api)
    assert api(f"/api/runs/{run_id}/events", events(), ndjson=True).status_code == 200
    assert webhooks.drain(15) and receiver.bodies == []
    assert Run.objects.get(pk=run_id).owner == owner


def test_our_trainers_sink_notifies_too(owner, receiver, settings):
    """A run on our workers writes its alerts through the same path (the sink)."""
    from django.db import transaction

    from dashboard.ingest import writer

    use_webhook(owner, receiver.url)
    run = Run.objects.create(name="ours", owner=owner, config={}, status="running")
    batch = writer.Batch()
    for ev in events(5):
        batch.add(run.pk, ev)
    with transaction.atomic():
        writer.write(run.pk, batch)
    assert webhooks.drain(15)
    assert [b["json"]["step"] for b in receiver.bodies] == [5]


def test_a_receiver_that_comes_back_gets_the_notification_on_a_later_try(
    owner, api, receiver, settings
):
    settings.ALERT_WEBHOOK_RETRY_S = [0.2, 0.2]
    use_webhook(owner, receiver.url)
    receiver.status = 503  # down for maintenance
    run_id = external_run(api)
    assert api(f"/api/runs/{run_id}/events", events(), ndjson=True).status_code == 200
    assert webhooks.drain(15)
    receiver.status = 204
    wait_for(lambda: WebhookDelivery.objects.get().status == "delivered", 15)
    d = WebhookDelivery.objects.get()
    assert d.attempts == 2 and d.last_result["status"] == 204
    assert [b["json"]["step"] for b in receiver.bodies] == [12, 12]
    assert AccountSettings.objects.get(user=owner).last_delivery["attempts"] == 2


def test_every_retry_spent_or_a_refusal_fails_the_notification(
    owner, api, receiver, settings
):
    settings.ALERT_WEBHOOK_RETRY_S = [0.1, 0.1]
    use_webhook(owner, receiver.url)
    receiver.status = 500
    run_id = external_run(api)
    assert api(f"/api/runs/{run_id}/events", events(), ndjson=True).status_code == 200
    wait_for(lambda: WebhookDelivery.objects.get().status == "failed", 15)
    assert WebhookDelivery.objects.get().attempts == 3  # the first and two retries
    receiver.status = 404  # a refusal is not tried again
    api(f"/api/runs/{run_id}/events", events(13), ndjson=True)
    wait_for(lambda: WebhookDelivery.objects.filter(status="failed").count() == 2, 15)
    refused = WebhookDelivery.objects.get(body__step=13)
    assert (refused.attempts, refused.last_result["status"]) == (1, 404)


def test_a_notification_a_stopped_process_left_is_sent_by_the_next(
    owner, receiver, settings
):
    """Stored with its alert (one transaction), not held in memory: a delivery that
    no sender took (the process stopped right after the commit) or whose sender
    died holding it (its claim lapsed) is sent by whichever sender looks next."""
    from datetime import timedelta

    from django.utils import timezone

    use_webhook(owner, receiver.url)
    run = Run.objects.create(name="r", owner=owner, config={}, status="running")
    body = webhooks.payload(run.pk, run.name, Alert(step=3, detector="repetition"))
    past = timezone.now() - timedelta(minutes=5)
    left = WebhookDelivery.objects.create(user=owner, body=body, next_at=past)
    held = WebhookDelivery.objects.create(
        user=owner, body={**body, "step": 4}, next_at=past, claimed_until=past
    )
    busy = WebhookDelivery.objects.create(
        user=owner,
        body={**body, "step": 5},
        next_at=past,
        claimed_until=timezone.now() + timedelta(minutes=1),  # a live sender has it
    )
    assert webhooks.send_due() == 2
    assert sorted(b["json"]["step"] for b in receiver.bodies) == [3, 4]
    for d in (left, held, busy):
        d.refresh_from_db()
    assert (left.status, held.status, busy.status) == ("delivered", "delivered",
                                                       "pending")  # fmt: skip


def test_a_webhook_turned_off_before_the_send_sends_nothing(owner, api, receiver):
    use_webhook(owner, receiver.url)
    run = Run.objects.create(name="r", owner=owner, config={}, status="running")
    body = webhooks.payload(run.pk, run.name, Alert(step=3, detector="repetition"))
    from django.utils import timezone

    WebhookDelivery.objects.create(user=owner, body=body, next_at=timezone.now())
    use_webhook(owner, "")
    assert webhooks.send_due() == 1 and receiver.bodies == []
    d = WebhookDelivery.objects.get()
    assert d.status == "failed" and "turned off" in d.last_result["error"]


def test_the_settings_page_sends_a_test_and_lists_the_deliveries(owner, api, receiver):
    from tests.dashboard.dashtest import client_for

    client = client_for(owner)
    r = client.post("/settings/", {"webhook_url": receiver.url, "action": "test"})
    assert r.status_code == 200
    html = r.content.decode()
    assert "delivered (204)" in html and "(not saved yet)" in html
    [sent] = receiver.bodies
    assert sent["json"]["event"] == "test" and sent["json"]["detector"] == "test"
    assert not AccountSettings.objects.filter(user=owner, webhook_url=receiver.url)
    bad = client.post("/settings/", {"webhook_url": "ftp://x/", "action": "test"})
    assert (
        bad.status_code == 400
        and "webhook_url: must start with" in bad.content.decode()
    )
    use_webhook(owner, receiver.url)
    run_id = external_run(api)
    api(f"/api/runs/{run_id}/events", events(), ndjson=True)
    assert webhooks.drain(15)
    page = client.get("/settings/").content.decode()
    assert (
        "spurious_parallelism at step 12" in page
        and 'data-delivery="delivered"' in page
    )
    assert "&lt;b&gt;hacked&lt;/b&gt; &amp; co" in page  # the run's name, escaped


@pytest.mark.django_db(transaction=True)
def test_the_sender_stops_when_asked_and_starts_again():
    def senders():
        return [t for t in threading.enumerate() if t.name == "alert-webhooks"]

    webhooks.start()
    assert len(senders()) == 1
    webhooks.stop()
    assert senders() == []  # joined: nothing of it reaches the database after
    webhooks.start()
    webhooks.start()
    assert len(senders()) == 1
    webhooks.stop()
    assert senders() == []
