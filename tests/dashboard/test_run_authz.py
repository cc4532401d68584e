"""Who may do what: every endpoint and the websocket, for owner, another user,
anonymous and staff. Other users get 404 (a run's existence is not revealed)."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator
from dashtest import client_for

RUN_ENDPOINTS = [
    ("get", "/api/runs/{id}"),
    ("get", "/api/runs/{id}/metrics"),
    ("get", "/api/runs/{id}/metrics?keys=reward"),
    ("get", "/api/runs/{id}/backfill"),
    ("get", "/api/runs/{id}/trajectories"),
    ("get", "/api/runs/{id}/trajectories/1/0/0"),
    ("get", "/api/runs/{id}/judgements"),
    ("get", "/api/runs/{id}/critical-paths"),
    ("get", "/api/runs/{id}/alerts"),
    ("get", "/api/runs/{id}/checkpoints"),
    ("get", "/api/runs/{id}/export"),
    ("post", "/api/runs/{id}/clone"),
    ("post", "/api/runs/{id}/cancel"),
    ("get", "/runs/{id}/"),
]
EXPECTED = {"owner": 200, "staff": 200, "other": 404, "anonymous": 401}


def call(client, method, url):
    if method == "post":
        return client.post(url, json.dumps({}), content_type="application/json")
    return client.get(url)


@pytest.fixture
def users(owner, other, staff):
    return {"owner": owner, "other": other, "staff": staff, "anonymous": None}


@pytest.mark.django_db
@pytest.mark.parametrize("role", list(EXPECTED))
@pytest.mark.parametrize("method, path", RUN_ENDPOINTS)
def test_run_endpoints_authorisation(role, method, path, users, run, enqueued):
    client = client_for(users[role])
    r = call(client, method, path.format(id=run.id))
    expected = EXPECTED[role]
    if path.startswith("/runs/") and role == "anonymous":
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
        return
    if expected == 200 and method == "post":
        expected = 201 if path.endswith("/clone") else 200
    assert r.status_code == expected, (role, path, r.content[:200])


@pytest.mark.django_db
@pytest.mark.parametrize("role", list(EXPECTED))
def test_listing_and_launching(role, users, run, tiny_config, enqueued):
    client = client_for(users[role])
    r = client.get("/api/runs")
    if role == "anonymous":
        assert r.status_code == 401
        assert (
            client.post(
                "/api/runs",
                json.dumps({"config": tiny_config}),
                content_type="application/json",
            ).status_code
            == 401
        )
        return
    ids = [x["id"] for x in r.json()["runs"]]
    assert ids == ([str(run.id)] if role in ("owner", "staff") else [])
    r = client.post(
        "/api/runs",
        json.dumps({"config": tiny_config}),
        content_type="application/json",
    )
    assert r.status_code == 201


@pytest.mark.django_db
def test_pages_need_a_login_and_the_login_page_works(owner):
    from django.test import Client

    anon = Client()
    for url in ("/", "/runs/", "/api/docs", "/admin/"):
        assert anon.get(url).status_code == 302, url
    assert anon.get("/healthz").status_code == 200
    page = anon.get("/accounts/login/")
    assert page.status_code == 200 and b"csrfmiddlewaretoken" in page.content
    r = anon.post("/accounts/login/", {"username": "owner", "password": "pw-owner-123"})
    assert r.status_code == 302 and anon.get("/runs/").status_code == 200


# --- websocket ---------------------------------------------------------------------------
def _session_cookie(user) -> bytes:
    client = client_for(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _connect(user, run_id, origin=b"http://localhost"):
    from dashboard.asgi import application

    headers = [(b"origin", origin), (b"host", b"localhost")]
    if user is not None:
        headers.append((b"cookie", await sync_to_async(_session_cookie)(user)))
    comm = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers=headers)
    # A page's join may wait up to JOIN_WAIT_S (5 s) for the run's group before the
    # hello; channels' default 1 s would fail on a slow machine, not on a bug.
    connected, code = await comm.connect(timeout=10)
    return comm, connected, code


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "role, close_code",
    [("owner", None), ("staff", None), ("other", 4404), ("anonymous", 4401)],
)
async def test_websocket_authorisation(role, close_code, users, run):
    """A refused socket is accepted and then closed with the documented code: a
    close before the accept would be a handshake rejection (HTTP 403, which a
    browser reports as 1006), so the page could not tell why."""
    comm, connected, _ = await _connect(users[role], run.id)
    assert connected is True
    if close_code is None:
        hello = json.loads(await comm.receive_from(timeout=10))
        assert hello["type"] == "hello" and hello["last_step"] == 6
        await comm.disconnect()
    else:
        closed = await comm.receive_output(timeout=5)
        assert closed["type"] == "websocket.close"
        assert closed["code"] == close_code and closed["reason"]
        assert await comm.receive_nothing(timeout=0.1)


def test_a_real_server_closes_a_refused_socket_with_its_code(daphne):
    """Under Daphne the browser's socket sees 4401 itself, not a failed handshake."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    port, _ = daphne
    base = f"127.0.0.1:{port}"
    url = f"ws://{base}/ws/runs/00000000-0000-0000-0000-000000000000/"
    origin = {"Origin": f"http://{base}"}
    with (
        connect(url, additional_headers=origin) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4401  # Daphne does not forward the reason


@pytest.mark.django_db(transaction=True)
async def test_websocket_refuses_a_foreign_origin(owner, run):
    comm, connected, _ = await _connect(owner, run.id, origin=b"https://evil.example")
    assert connected is False


@pytest.mark.django_db(transaction=True)
async def test_websocket_forwards_frames_of_its_run_only(
    owner, run, tiny_config, enqueued
):
    from dashboard.live import frames
    from dashboard.live.frames import FrameParts
    from dashboard.runs import services

    other_run = await sync_to_async(services.launch_run)(owner, tiny_config)
    comm, connected, _ = await _connect(owner, run.id)
    assert connected
    await comm.receive_from(timeout=10)  # hello
    await sync_to_async(frames.send)(
        other_run.id, FrameParts(steps={1: {"reward": 1.0}})
    )
    await sync_to_async(frames.send)(
        run.id, FrameParts(steps={7: {"reward": 0.5, "kl": "NaN"}})
    )
    frame = json.loads(await comm.receive_from(timeout=10))
    assert frame["run"] == str(run.id) and frame["steps"] == [
        {"step": 7, "metrics": {"reward": 0.5, "kl": "NaN"}}
    ]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_one_process_joins_a_run_group_once_whatever_the_number_of_pages(
    owner, run
):
    from channels.layers import InMemoryChannelLayer, get_channel_layer

    from dashboard.consumers import hub
    from dashboard.live import frames, streaming
    from dashboard.live.frames import FrameParts

    pages = []
    for _ in range(3):
        comm, connected, _ = await _connect(owner, run.id)
        assert connected
        await comm.receive_from(timeout=10)  # hello
        pages.append(comm)
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        assert len(layer.groups[streaming.group_name(run.id)]) == 1
    await sync_to_async(frames.send)(run.id, FrameParts(steps={9: {"reward": 1.0}}))
    for comm in pages:
        assert json.loads(await comm.receive_from(timeout=10))["steps"][0]["step"] == 9
    for comm in pages:
        await comm.disconnect()
    assert str(run.id) not in hub().sockets and str(run.id) not in hub().readers
