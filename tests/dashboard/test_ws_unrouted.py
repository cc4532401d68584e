"""A websocket to a path no socket lives at is closed with 4404, login or not: never
Channels' "No route found", which Daphne logs with a traceback and answers 500 (anyone
could fill the log)."""

from __future__ import annotations

import uuid

import pytest
from channels.testing import WebsocketCommunicator

RUN = uuid.UUID("00000000-0000-0000-0000-000000000001")  # fixed: stable test ids
UNROUTED = [
    "/ws/runs/nope/",
    "/",
    "/api/runs",
    f"/ws/runs/{RUN}",  # a run's path without its trailing slash
    f"/ws/runs/{RUN}/extra/",
    "/ws/\n",
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", UNROUTED)
async def test_an_unrouted_path_is_closed_with_4404_without_an_exception(path):
    from dashboard.asgi import application

    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected is True  # accepted, then closed: the client sees the code
    closed = await comm.receive_output(timeout=5)
    assert closed == {
        "type": "websocket.close",
        "code": 4404,
        "reason": "no such socket",
    }
    assert await comm.receive_nothing(timeout=0.1)
    await comm.wait()  # re-raises anything the application raised


@pytest.mark.django_db(transaction=True)
async def test_a_foreign_origin_is_still_refused_at_the_handshake():
    from dashboard.asgi import application

    headers = [(b"origin", b"https://evil.example"), (b"host", b"localhost")]
    comm = WebsocketCommunicator(application, "/nope/", headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected is False


def test_a_real_server_closes_an_unrouted_socket_with_4404(daphne):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    port, _ = daphne
    base = f"127.0.0.1:{port}"
    with (
        connect(
            f"ws://{base}/ws/runs/nope/",
            additional_headers={"Origin": f"http://{base}"},
        ) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4404
