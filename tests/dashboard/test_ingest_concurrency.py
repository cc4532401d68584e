"""Two denial-of-service holes of the external-run ingest API, closed.

* Parsing one 87 KB gzip events body (990,000 metric values, within every
  per-request limit) cost ~75 MB; 8 at once +600 MB RSS. At most
  ``INGEST_MAX_CONCURRENT`` ingest bodies (events API and trackio together) are in
  hand at once; past a wait of ``INGEST_QUEUE_WAIT_S`` the request is a 503 with
  ``Retry-After`` (our HttpSink and trackio's client both send it again).
* One user created 1,005 external runs in two requests: at most
  ``EXTERNAL_RUNS_MAX_PER_USER`` each, on both endpoints.

The slots are held by taking them in the test (``admission.slot()``), never by timing.
"""

from __future__ import annotations

import json
import threading
import uuid
from contextlib import ExitStack

import pytest

from dashboard.ingest import admission
from dashboard.models import MetricPoint, Run
from dashboard.runs import external
from dashboard.runs import trackio as trackio_calls
from dashboard.site import tokens
from tests.dashboard.test_external_runs import TokenClient, new_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_waiting(settings):
    settings.INGEST_MAX_CONCURRENT = 2
    settings.INGEST_QUEUE_WAIT_S = 0
    assert admission.held() == 0 == admission.held("small")
    yield
    assert admission.held() == 0 == admission.held("small")  # every slot given back


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "x")[1])


def holding(n: int, pool: str = "bodies") -> ExitStack:
    """``n`` slots of ``pool`` taken, as ``n`` requests in progress would hold them."""
    stack = ExitStack()
    for _ in range(n):
        stack.enter_context(admission.slot(wait=0, pool=pool))
    return stack


def step_events(*steps):
    return [{"type": "step", "step": s, "metrics": {"loss": 1.0 / s}} for s in steps]


def entry(run="r1", step=1, **extra):
    return {"project": "proj", "run": run, "run_id": f"id-{run}",
            "metrics": {"loss": 0.5}, "step": step, "log_id": uuid.uuid4().hex,
            **extra}  # fmt: skip


def trackio_post(user, *logs, name="bulk_log"):
    from django.test import Client

    token = tokens.do_create_token(user, "trackio")[1]
    return Client(enforce_csrf_checks=True).post(
        f"/trackio/api/{name}",
        json.dumps({"args": [], "kwargs": {"logs": list(logs)}}),
        content_type="application/json",
        headers={"X-Trackio-Write-Token": token},
    )


# --- INGEST_MAX_CONCURRENT -----------------------------------------------------------
def test_events_beyond_the_cap_are_a_503_with_retry_after_while_the_slots_are_held(
    api,
):
    run_id = new_run(api)
    with holding(2):
        r = api.post_events(run_id, step_events(1, 2), gzip_it=True)
        assert r.status_code == 503, r.content
        assert int(r["Retry-After"]) >= 1
        body = r.json()
        assert "INGEST_MAX_CONCURRENT" in body["detail"]
        assert "INGEST_MAX_CONCURRENT" in body["errors"][0]
        assert MetricPoint.objects.count() == 0
    # a slot free: the same batch is taken (what HttpSink's retry does)
    r = api.post_events(run_id, step_events(1, 2), gzip_it=True)
    assert r.status_code == 200, r.content
    assert MetricPoint.objects.count() == 2


def test_the_cap_is_a_setting(api, settings):
    run_id = new_run(api)
    with holding(1):  # one of the default two free
        assert api.post_events(run_id, step_events(1)).status_code == 200
    settings.INGEST_MAX_CONCURRENT = 3
    with holding(2):
        assert api.post_events(run_id, step_events(2)).status_code == 200
    with holding(3):
        assert api.post_events(run_id, step_events(3)).status_code == 503
    assert MetricPoint.objects.count() == 2


def test_cheap_refusals_take_no_slot(api, other):
    """Authentication and the run's ownership are checked before waiting for one."""
    run_id = new_run(api)
    with holding(2):
        stranger = TokenClient(tokens.do_create_token(other, "y")[1])
        assert stranger.post_events(run_id, step_events(1)).status_code == 404
        anonymous = TokenClient("arl_not-a-token")
        assert anonymous.post_events(run_id, step_events(1)).status_code == 401
        assert api.post_events(run_id, step_events(1)).status_code == 503


def test_a_trackio_write_beyond_the_cap_is_a_503_the_client_sends_again(owner):
    """trackio's client raises on a non-2xx answer (``raise_for_status``), keeps the
    batch in its local buffer and re-sends it with the same log ids: a 5xx is what
    it counts as transient (``is_transient_remote_error``)."""
    logs = [entry(step=1), entry(step=2)]
    with holding(2):
        r = trackio_post(owner, *logs)
        assert r.status_code == 503, r.content
        assert int(r["Retry-After"]) >= 1
        assert "INGEST_MAX_CONCURRENT" in r.json()["error"]
        assert Run.objects.count() == 0 and MetricPoint.objects.count() == 0
        # reads (init's) take no slot
        reads = trackio_post(owner, name="get_all_projects")
        assert reads.status_code == 200 and reads.json()["error"] is None
    r = trackio_post(owner, *logs)
    assert r.status_code == 200 and r.json()["error"] is None, r.content
    assert MetricPoint.objects.count() == 2


def alert(step=1, text="loss 9.0"):
    return {"project": "proj", "run": "r1", "run_id": "id-r1", "title": "loss spiked",
            "text": text, "level": "error", "step": step,
            "timestamp": "2026-01-01T00:00:00+00:00", "alert_id": uuid.uuid4().hex}  # fmt: skip


def test_a_small_trackio_alert_batch_is_stored_while_the_slots_are_held(owner):
    """trackio's client never sends a refused alert batch again (its local buffer
    re-sends logs only): one that small takes a slot of its own pool, so it is
    stored while the big bodies hold theirs; a large one waits for a slot like any
    write; the small ones are bounded too (their pool full: 503)."""
    from django.test import Client

    from dashboard.models import Alert

    token = tokens.do_create_token(owner, "trackio")[1]

    def post(*alerts):
        return Client().post(
            "/trackio/api/bulk_alert",
            json.dumps({"args": [], "kwargs": {"alerts": list(alerts)}}),
            content_type="application/json",
            headers={"X-Trackio-Write-Token": token},
        )

    with holding(2):
        r = post(alert(1), alert(2))
        assert r.status_code == 200 and r.json()["error"] is None, r.content
        assert Alert.objects.count() == 2
        big = post(*(alert(3 + i, text="x" * 1000) for i in range(80)))  # 80+ KB
        assert big.status_code == 503, big.content
    assert Alert.objects.count() == 2
    with holding(2, pool="small"):
        crowded = post(alert(90))
        assert crowded.status_code == 503, crowded.content
    assert post(*(alert(3 + i, text="x" * 1000) for i in range(80))).status_code == 200
    assert Alert.objects.count() == 82


def test_a_slot_is_given_back_when_parsing_fails(api, monkeypatch):
    run_id = new_run(api)
    seen = []

    def broken(data):
        seen.append(admission.held())
        raise RuntimeError("parser bug")

    monkeypatch.setattr(external, "parse_events", broken)
    r = api.post_events(run_id, step_events(1), gzip_it=True)
    assert r.status_code == 500
    assert seen == [1]  # parsed inside a slot...
    assert admission.held() == 0  # ...given back after the exception
    monkeypatch.undo()
    # a refused body (400, 413) gives it back too, and the slots still serve
    assert api.post_events(run_id, [], raw=b"{not json\n").status_code == 400
    assert admission.held() == 0
    for step in range(1, 4):
        assert api.post_events(run_id, step_events(step)).status_code == 200


def test_a_trackio_slot_is_given_back_when_the_call_fails(owner, monkeypatch):
    seen = []

    def broken(user, logs):
        seen.append(admission.held())
        raise RuntimeError("converter bug")

    monkeypatch.setattr(trackio_calls, "do_bulk_log", broken)
    r = trackio_post(owner, entry())
    assert r.status_code == 500 and seen == [1]
    assert admission.held() == 0
    monkeypatch.undo()
    r = trackio_post(owner, "not an entry")  # refused (200 {"error"}): given back
    assert r.status_code == 200 and "must be an object" in r.json()["error"]
    assert admission.held() == 0


def test_a_waiting_request_takes_the_slot_given_back_during_its_wait():
    got = []
    with holding(2) as held:
        waiter = threading.Thread(target=lambda: got.append(admission.acquire(30)))
        waiter.start()
        held.close()  # both given back while it waits (or before it asked)
        waiter.join(10)
    assert got == [True]
    admission.release()


def test_the_wait_runs_out_without_a_slot():
    with holding(2), pytest.raises(admission.Busy) as caught, admission.slot(0.01):
        pass
    assert caught.value.status == 503
    assert caught.value.headers == {"Retry-After": "1"}


CLIENT = """
import json, time, trackio
run = trackio.init(project="p", name="r", auto_log_cpu=False, auto_log_gpu=False)
for i in range(10):
    trackio.log({"loss": float(i)})
    time.sleep(0.5)
trackio.finish()
print(json.dumps({"run_id": run.id}))
"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_real_trackio_client_sends_a_batch_answered_503_again(
    live_server, owner, tmp_path, monkeypatch
):
    """trackio's own client against a server whose slots are taken: its first
    writes are answered 503, then the slots are given back, and every step is
    stored, once."""
    from tests.dashboard.test_trackio_client import run_client

    refused, answered_503 = threading.Semaphore(0), []
    busy = admission.Busy.__init__

    def counted(self, *args):
        busy(self, *args)
        answered_503.append(args)
        refused.release()

    monkeypatch.setattr(admission.Busy, "__init__", counted)
    held = holding(2)

    def give_back_after_two_refusals():
        try:
            for _ in range(2):
                refused.acquire(timeout=60)
        finally:
            held.close()

    releaser = threading.Thread(target=give_back_after_two_refusals)
    releaser.start()
    try:
        token = tokens.do_create_token(owner, "trackio")[1]
        run_client(f"{live_server.url}/trackio/?write_token={token}", CLIENT, tmp_path)
    finally:
        refused.release(2)
        releaser.join()
    assert len(answered_503) >= 2
    steps = MetricPoint.objects.filter(key="loss").values_list("step", flat=True)
    assert sorted(steps) == list(range(10))


# --- EXTERNAL_RUNS_MAX_PER_USER ------------------------------------------------------
def test_the_external_runs_api_refuses_a_run_past_the_users_cap(api, owner, settings):
    settings.EXTERNAL_RUNS_MAX_PER_USER = 3
    for _ in range(3):
        new_run(api)
    r = api.post_json("/api/runs/external", {"name": "one too many"})
    assert r.status_code == 409, r.content
    error = r.json()["errors"][0]
    assert "EXTERNAL_RUNS_MAX_PER_USER" in error and "3 external runs" in error
    assert Run.objects.filter(owner=owner).count() == 3
    assert not Run.objects.filter(name="one too many").exists()


def test_the_cap_counts_only_the_users_own_live_runs(api, owner, other, settings):
    settings.EXTERNAL_RUNS_MAX_PER_USER = 2
    first = new_run(api)
    new_run(api)
    assert api.post_json("/api/runs/external", {"name": "x"}).status_code == 409
    # another user is unaffected
    theirs = TokenClient(tokens.do_create_token(other, "y")[1])
    new_run(theirs)
    new_run(theirs)
    # a deleted run does not count
    Run.objects.filter(pk=first).delete()
    new_run(api)
    assert Run.objects.filter(owner=owner).count() == 2
    # the runs there take events as before
    run_id = str(Run.objects.filter(owner=owner).first().pk)
    assert api.post_events(run_id, step_events(1)).status_code == 200


def test_trackios_implicit_run_creation_is_refused_past_the_cap(
    bulk_log, owner, other, settings
):
    settings.EXTERNAL_RUNS_MAX_PER_USER = 2
    assert bulk_log(entry("r0"), entry("r1"))["error"] is None
    answer = bulk_log(entry("r0", step=2), entry("r2"))
    assert "EXTERNAL_RUNS_MAX_PER_USER" in answer["error"], answer
    assert "2 external runs" in answer["error"] and "logs[1].run" in answer["error"]
    # nothing of the call stored: no run r2, not r0's step 2 either
    assert Run.objects.filter(owner=owner).count() == 2
    assert not MetricPoint.objects.filter(step=2).exists()
    # the runs there go on; another user's trackio runs are unaffected
    assert bulk_log(entry("r0", step=2), entry("r1", step=2))["error"] is None
    r = trackio_post(other, entry("r0"), entry("r1"))
    assert r.json()["error"] is None
    assert Run.objects.filter(owner=other).count() == 2


def test_the_default_cap_is_a_thousand_and_refuses_the_1001st(api, owner):
    from django.conf import settings

    assert settings.EXTERNAL_RUNS_MAX_PER_USER == 1000
    Run.objects.bulk_create(
        [
            Run(owner=owner, name=f"r{i}", config={}, external=True, queue="")
            for i in range(1000)
        ]
    )
    r = api.post_json("/api/runs/external", {"name": "1001st"})
    assert r.status_code == 409 and "1,000 external runs" in r.json()["errors"][0]
    assert Run.objects.filter(owner=owner).count() == 1000
