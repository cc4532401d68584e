"""Request bodies are bounded before authentication and before Django reads them
(issue 21.1): a declared or streamed body over the limit is a JSON 413, a stalled one a
408, and a real Daphne server's memory does not grow with what a client sends."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time

import pytest
from realserver import PeakRss

from dashboard.site.limits import REST, BodyLimit, _FirstChunk, _Guard, body_limit

MB = 1 << 20


# --- the ASGI layer ------------------------------------------------------------------


class App:
    """Reads the whole body like Django does, then answers 200."""

    def __init__(self):
        self.called = False
        self.received = 0
        self.disconnected = False

    async def __call__(self, scope, receive, send):
        self.called = True
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return
            self.received += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _call(app, *, path="/api/runs/external", headers=(), chunks=(), delay=0.0):
    sent, pending = [], list(chunks)

    async def receive():
        if delay:
            await asyncio.sleep(delay)
        if not pending:
            await asyncio.sleep(3600)
        body = pending.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "headers": list(headers), "method": "POST"}
    asyncio.run(BodyLimit(app)(scope, receive, send))
    return sent


def _status(sent):
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def _errors(sent):
    body = b"".join(
        m.get("body", b"") for m in sent if m["type"] == "http.response.body"
    )
    return json.loads(body)


def test_a_declared_length_over_the_limit_is_refused_before_the_app_runs(settings):
    settings.REQUEST_MAX_BODY_BYTES = 1000
    app = App()
    sent = _call(app, headers=[(b"content-length", b"2000000000")])
    assert _status(sent) == 413 and not app.called
    assert _errors(sent) == {
        "errors": ["body: the request body is larger than the limit of 1000 bytes"],
        "limit": 1000,
    }


def test_a_streamed_body_is_refused_as_it_passes_the_limit(settings):
    settings.REQUEST_MAX_BODY_BYTES = 1000
    app = App()
    sent = _call(app, chunks=[b"x" * 600, b"x" * 600, b"x" * 600])
    assert _status(sent) == 413
    assert app.disconnected and app.received == 600  # the app never saw the rest
    assert len([m for m in sent if m["type"] == "http.response.start"]) == 1


def test_a_body_within_the_limit_reaches_the_app(settings):
    settings.REQUEST_MAX_BODY_BYTES = 1000
    app = App()
    sent = _call(app, chunks=[b"x" * 500, b"x" * 500])
    assert _status(sent) == 200 and app.received == 1000


def test_a_stalled_body_is_a_408(settings):
    settings.REQUEST_BODY_TIMEOUT_S = 0.2
    app = App()
    sent = _call(app, chunks=[b"x"], delay=1.0)
    assert _status(sent) == 408 and app.disconnected
    assert _errors(sent)["errors"][0].startswith("body: the request body did not")


def test_the_limit_follows_the_path(settings):
    settings.REQUEST_MAX_BODY_BYTES = 1 * MB
    settings.EVENTS_MAX_BODY_BYTES = 4 * MB
    settings.DATASET_MAX_UPLOAD_BYTES = 50 * MB
    assert body_limit("/api/runs/external") == 1 * MB
    assert body_limit("/api/runs/0f6c/events") == 4 * MB
    assert body_limit("/datasets/") > 50 * MB


# --- a real Daphne server --------------------------------------------------------------


# ``daphne``: the fixture in conftest.py (a real Daphne, module-wide).


def _head(path: str, length: int | None, extra: str = "") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{size}{extra}"
        "Content-Type: application/json\r\n\r\n"
    ).encode()


def _send_until_refused(port: int, head: bytes, chunk: bytes, total: int):
    """Send ``head`` then up to ``total`` bytes of ``chunk``s; return the answer and
    the seconds from the first byte to the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head)
    start, sent = time.monotonic(), 0
    sock.settimeout(0.0)
    answer = b""
    try:
        while sent < total:
            try:
                sent += sock.send(chunk)
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                answer += sock.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
        sock.settimeout(5)
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    except (ConnectionResetError, TimeoutError):
        pass
    finally:
        sock.close()
    return answer, time.monotonic() - start


@pytest.mark.slow
def test_daphne_refuses_a_declared_2_gb_body_at_once(daphne):
    port, proc = daphne
    with PeakRss(proc) as server:
        answer, _ = _send_until_refused(
            port, _head("/api/runs/external", 2 << 30), b"x" * MB, 1 * MB
        )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"limit"' in answer
    assert server.cpu_s < 1.0, f"{server.cpu_s:.2f} s of server CPU"
    assert server.growth < 50, f"{server.growth:.0f} MB"


@pytest.mark.slow
def test_daphne_refuses_a_1_gb_chunked_body_without_growing(daphne):
    port, proc = daphne
    head = _head("/api/runs/external", None, "Transfer-Encoding: chunked\r\n")
    piece = b"x" * (256 << 10)
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    with PeakRss(proc) as server:
        answer, _ = _send_until_refused(port, head, chunk, 1 << 30)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert server.cpu_s < 1.0, f"{server.cpu_s:.2f} s of server CPU"
    assert server.growth < 50, f"{server.growth:.0f} MB"


@pytest.mark.slow
def test_daphne_answers_a_stalled_body_408(daphne):
    port, _ = daphne
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(_head("/api/runs/external", 1000) + b"x" * 10)
    start = time.monotonic()
    answer = sock.recv(65536)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert 1.5 < time.monotonic() - start < 6


# --- Daphne's body handed over by reference ------------------------------------------


class _Request:
    def __init__(self, body: bytes):
        self.content = io.BytesIO(body)  # Twisted's, for a small body


def _daphne_queue(body: bytes, buffer: int = 8192):
    """What Daphne's ``process`` puts in an app's queue, through ``_FirstChunk``."""
    queue, request = asyncio.Queue(), _Request(body)
    first = _FirstChunk(queue, request)
    while True:  # Daphne's loop: a short read is the last chunk
        chunk = request.content.read(buffer)
        more = len(chunk) == buffer
        first.put_nowait({"type": "http.request", "body": chunk, "more_body": more})
        if not more:
            break
    return queue, request


@pytest.mark.parametrize("size", [0, 100, 8192, 3 * 8192, 200_001])
def test_under_daphne_only_the_first_chunk_is_queued_and_the_rest_read_from_the_file(
    settings, size
):
    settings.REQUEST_MAX_BODY_BYTES = 1 * MB
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    queue, request = _daphne_queue(body)
    assert queue.qsize() == 1  # not one message per chunk
    request.content.seek(0)  # Daphne is done with the file; the guard seeks itself

    received = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            received.append(message)
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        pass

    scope = {"type": "http", "path": "/api/runs/external", "headers": []}
    asyncio.run(BodyLimit(app)(scope, queue.get, send))
    assert b"".join(m["body"] for m in received) == body
    assert all(REST not in m for m in received)
    assert max(len(m["body"]) for m in received) <= 64 << 10


def test_under_daphne_a_disconnect_still_reaches_the_app_and_a_closed_file_is_one():
    queue, request = _daphne_queue(b"y" * 20_000)
    guard = _Guard(queue.get, None, 1 * MB)

    async def run():
        first = await guard.receive()
        request.content.close()  # Twisted cleaned up: the client went away
        return first, await guard.receive()

    first, after = asyncio.run(run())
    assert first["body"] == b"y" * 8192 and first["more_body"]
    assert after == {"type": "http.disconnect"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /runs/?q=" + b"a" * 50_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"414"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20_000 + b"\r\n\r\n", b"431"),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A: "
            + b"a" * 9000
            + b"\r\nX-B: "
            + b"b" * 9000
            + b"\r\n\r\n",
            b"431",
        ),
    ],
    ids=["request-line", "header-line", "headers-in-all"],
)
def test_daphne_answers_a_line_too_long_with_its_status(daphne, head, status):
    """A 50 KB URL once closed the connection without an answer (the audit's)."""
    port, _ = daphne
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head)
        answer = b""
        while b"}" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert b"Connection: close" in answer and b"16384 bytes" in answer
