"""Request bodies bounded before anything trusts them: before authentication, before
Django reads a byte, whatever the ASGI server.

Two layers, one rule (:func:`body_limit`, the most a path may receive):

* :class:`BodyLimit`, ASGI middleware in front of the whole app: a declared
  ``Content-Length`` over the limit is answered 413 without reading the body; a body
  that streams in (chunked, or a lying length) is counted as it arrives and answered
  413 the moment it passes the limit, the app seeing a disconnect. A body that stalls
  for ``REQUEST_BODY_TIMEOUT_S`` is answered 408. This is all a streaming server
  (Uvicorn, Hypercorn) needs.
* :func:`install_daphne_limits`: Daphne buffers a whole body (Twisted writes it to a
  temporary file) and then hands it to the app in one go, so by the time any ASGI code
  runs the memory is spent. Its request class is replaced by one that applies the same
  rule while the body arrives: over the declared length it answers 413 at the headers,
  counts the bytes of a chunked body, and answers 408 when a body has not finished
  within the timeout (a slow or idle sender). :mod:`dashboard.asgi` installs it when
  it runs under Daphne. It also keeps two copies of a body out of memory: Twisted's
  own parse of a form body (the whole body read and run through the email parser,
  for ``request.args`` that Daphne never reads: about twelve times a 48 MB upload),
  and Daphne's queue of every chunk of the body at once. Only the first chunk is
  queued, with a reference to the rest (the temporary file Twisted wrote,
  :data:`REST`); :class:`BodyLimit` reads the rest from it as the app asks.

Every refusal is JSON, ``{"errors": ["body: ..."], "limit": N}``, with
``Connection: close``; the reverse proxy should refuse large bodies too (README).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

_EVENTS = re.compile(r"^/api/runs/[^/]+/events/?$")
_UPLOADS = ("/datasets/",)
_TRACKIO = "/trackio/"
_MULTIPART_SLACK = 64 << 10  # form fields and boundaries around an uploaded file
# Key of the first body message under Daphne: (the body's file, where the rest
# starts, where it ends), read by _Guard (install_daphne_limits).
REST = "dashboard.body_rest"
_REST_CHUNK = 64 << 10


def body_limit(path: str) -> int:
    """The most bytes a request to ``path`` may carry."""
    if _EVENTS.match(path):
        return settings.EVENTS_MAX_BODY_BYTES
    if path.startswith(_TRACKIO):
        return settings.TRACKIO_MAX_BODY_BYTES
    if path.startswith(_UPLOADS):
        return settings.DATASET_MAX_UPLOAD_BYTES + _MULTIPART_SLACK
    return settings.REQUEST_MAX_BODY_BYTES


def refusal(status: int, limit: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The JSON body and headers of a 413 (too large) or 408 (too slow) refusal."""
    if status == 413:
        message = f"body: the request body is larger than the limit of {limit} bytes"
    else:
        message = (
            f"body: the request body did not arrive within "
            f"{settings.REQUEST_BODY_TIMEOUT_S:g} s"
        )
    body = json.dumps({"errors": [message], "limit": limit}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return body, headers


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The ``Content-Length`` a request declares (``None``: none or unreadable)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: bodies over :func:`body_limit` or slower than the timeout are
    refused before the wrapped app reads them."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = body_limit(scope.get("path", ""))
        length = declared_length(scope.get("headers", []))
        if length is not None and length > limit:
            return await _refuse(send, 413, limit)
        guard = _Guard(receive, send, limit)
        return await self.app(scope, guard.receive, guard.send)


async def _refuse(send: Send, status: int, limit: int) -> None:
    body, headers = refusal(status, limit)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Guard:
    """Counts the body as the app receives it; once refused, the app's own response is
    dropped and it sees a disconnect."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.seen = 0
        self.refused = False
        self.complete = False
        self._rest: list[Any] | None = None

    async def receive(self) -> dict[str, Any]:
        if self.refused:
            return {"type": "http.disconnect"}
        if self.complete:
            return await self._receive()
        if self._rest is not None:
            message = self._read_rest()
        else:
            try:
                message = await asyncio.wait_for(
                    self._receive(), timeout=settings.REQUEST_BODY_TIMEOUT_S
                )
            except TimeoutError:
                return await self._stop(408)
            if REST in message:
                message = dict(message)
                self._rest = list(message.pop(REST))
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.limit:
                return await self._stop(413)
            self.complete = not message.get("more_body", False)
        return message

    def _read_rest(self) -> dict[str, Any]:
        """The next chunk of a body Daphne left in its file (the whole body has
        arrived: reading it does not wait on the client)."""
        content, start, end = self._rest
        try:
            content.seek(start)
            chunk = content.read(min(_REST_CHUNK, end - start))
        except (OSError, ValueError):  # closed: the client went away
            return {"type": "http.disconnect"}
        self._rest[1] = start + len(chunk)
        more = bool(chunk) and start + len(chunk) < end
        return {"type": "http.request", "body": chunk, "more_body": more}

    async def _stop(self, status: int) -> dict[str, Any]:
        self.refused = True
        await _refuse(self._send, status, self.limit)
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if not self.refused:
            await self._send(message)


def install_daphne_limits() -> None:
    """Make Daphne apply :func:`body_limit` while a body arrives (see the module
    docstring). Idempotent; a no-op if Daphne is not installed."""
    try:
        from daphne import http_protocol
    except ImportError:  # pragma: no cover - daphne is pinned in requirements.txt
        return
    if getattr(http_protocol.WebRequest, "bounded", False):
        return
    http_protocol.WebRequest = _bounded_request(http_protocol.WebRequest)
    _answer_long_lines()


def _answer_long_lines() -> None:
    """A request line or a header line longer than Twisted's 16 KiB closed the
    connection without a word (a client saw a reset, no status): it is answered 414
    (the request line: a URL too long) or 431 (a header line), then closed; a head
    over its 16 KiB in all, or of too many headers, 431 rather than a bare 400."""
    from twisted.web import http

    def answer(channel: Any, status: bytes, error: str) -> None:
        body = json.dumps({"errors": [f"request: {error}"]}).encode()
        channel.transport.write(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        channel.loseConnection()

    def line_too_long(self, line: bytes) -> None:
        if getattr(self, "_HTTPChannel__first_line", 1):  # before the request line
            status, what = b"414 URI Too Long", "the request line (its URL)"
        else:
            status, what = b"431 Request Header Fields Too Large", "a header line"
        answer(self, status, f"{what} is longer than {self.MAX_LENGTH} bytes")

    bad_request = http.HTTPChannel._respondToBadRequestAndDisconnect

    def refuse(self) -> None:
        too_large = b"431 Request Header Fields Too Large"
        if getattr(self, "_receivedHeaderSize", 0) > self.totalHeadersSize:
            size = self.totalHeadersSize
            answer(self, too_large, f"the headers are longer than {size} bytes in all")
        elif getattr(self, "_receivedHeaderCount", 0) > self.maxHeaders:
            answer(self, too_large, f"more than {self.maxHeaders} headers")
        else:
            bad_request(self)

    http.HTTPChannel.lineLengthExceeded = line_too_long
    http.HTTPChannel._respondToBadRequestAndDisconnect = refuse


def _bounded_request(base: type) -> type:
    from twisted.internet import reactor

    class BoundedWebRequest(base):
        """Daphne's request, refusing a body over the limit or past the timeout
        while it arrives instead of after buffering it."""

        bounded = True
        _refused = False
        _deadline = None
        _app_queue = None

        def __init__(self, *args, **kwargs):
            # Daphne never reads Twisted's parse of a form body (request.args).
            kwargs["parsePOSTFormSubmission"] = False
            super().__init__(*args, **kwargs)

        @property
        def application_queue(self):
            return self._app_queue

        @application_queue.setter
        def application_queue(self, queue):
            self._app_queue = None if queue is None else _FirstChunk(queue, self)

        def gotLength(self, length):  # noqa: N802 - Twisted's name
            path = (getattr(self.channel, "_path", b"") or b"").split(b"?", 1)[0]
            self._limit = body_limit(path.decode("latin-1"))
            self._seen = 0
            if length is not None and length > self._limit:
                return self._refuse(413)
            super().gotLength(length)
            if length != 0:
                self._deadline = reactor.callLater(
                    settings.REQUEST_BODY_TIMEOUT_S, self._refuse, 408
                )

        def handleContentChunk(self, data):  # noqa: N802 - Twisted's name
            if self._refused:
                return
            self._seen += len(data)
            if self._seen > self._limit:
                return self._refuse(413)
            super().handleContentChunk(data)

        def requestReceived(self, command, path, version):  # noqa: N802
            self._cancel_deadline()
            if not self._refused:
                super().requestReceived(command, path, version)

        def connectionLost(self, reason):  # noqa: N802 - Twisted's name
            self._cancel_deadline()
            super().connectionLost(reason)

        def _cancel_deadline(self) -> None:
            if self._deadline is not None and self._deadline.active():
                self._deadline.cancel()
            self._deadline = None

        def _refuse(self, status: int) -> None:
            if self._refused:
                return
            self._refused = True
            self._cancel_deadline()
            body, headers = refusal(status, self._limit)
            reason = b"Payload Too Large" if status == 413 else b"Request Timeout"
            head = b"HTTP/1.1 %d %s\r\n" % (status, reason)
            head += b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
            transport = self.channel.transport
            if transport is not None:
                transport.write(head + b"\r\n" + body)
                transport.loseConnection()

    return BoundedWebRequest


class _FirstChunk:
    """Daphne's side of an app's queue: it queues the body's first chunk with a
    reference to the rest (:data:`REST`) and drops the chunks Daphne reads after
    it, which :class:`_Guard` reads back from the file one at a time."""

    def __init__(self, queue: asyncio.Queue, request: Any) -> None:
        self.queue, self.request = queue, request
        self.dropping = False
        self.started = False

    def put_nowait(self, message: dict[str, Any]) -> None:
        if message["type"] != "http.request":
            self.queue.put_nowait(message)
        elif self.dropping:
            self.dropping = message.get("more_body", False)
        elif not self.started:
            self.started = True
            if message.get("more_body"):
                # Left at its end, Daphne's next read is empty and it stops.
                content = self.request.content
                start = content.tell()
                message = {**message, REST: (content, start, content.seek(0, 2))}
                self.dropping = True
            self.queue.put_nowait(message)
