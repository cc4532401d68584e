"""One alert-webhook POST (:mod:`dashboard.ingest.webhooks`), within a deadline,
to an address checked.

The whole request, from looking up the host to reading the answer's headers, ends
by one deadline however slowly a receiver drips its answer (one sender thread
serves every user). The host is resolved once and the connection made to the
address checked (:func:`dashboard.site.account.refusal`: no loopback, private,
link-local... unless ``ALERT_WEBHOOK_ALLOW_PRIVATE``), so a second lookup cannot
answer differently (DNS rebinding); the Host header and the certificate's name are
the URL's.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from dashboard.site import account


def host_of(url: str) -> str:
    """The URL without its path and query (which may hold a secret) for the log."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class Refused(Exception):
    """The URL's host is (or resolves to) an address webhooks must not go to."""


def post(url: str, data: bytes, deadline: float) -> int:
    """POST ``data`` to ``url``; the answer's status. The host is resolved once and
    the connection made to the address checked (a second lookup could answer
    differently: DNS rebinding); the Host header and the certificate's name are the
    URL's. Everything, the lookup included, ends by ``deadline`` (monotonic) or
    raises TimeoutError. The answer's body is not read: nothing in it is used."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"not an http(s) URL with a host: {host_of(url)}")
    kind = _PinnedTLS if scheme == "https" else _Pinned
    conn = kind(host, parts.port)
    conn.deadline = deadline
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", target, body=data, headers=_HEADERS)
        return conn.getresponse().status
    finally:
        conn.close()


_HEADERS = {
    "Content-Type": "application/json",
    "User-Agent": "agentic-rl-dashboard (alert webhook)",
    "Connection": "close",
}


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """A socket connected to ``host``'s first address that answers, once every
    address it resolves to is allowed (:func:`~dashboard.site.account.refusal`)."""
    found = _resolve(host, port, deadline)
    for *_, sockaddr in found:
        refused = account.refusal(host, sockaddr[0])
        if refused:
            raise Refused(refused)
    error: OSError = OSError(f"{host} has no address")
    for family, type_, proto, _, sockaddr in found:
        sock = socket.socket(family, type_, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def _resolve(host: str, port: int, deadline: float) -> list[tuple]:
    """``getaddrinfo`` by ``deadline``: looked up in a thread of its own, since a
    lookup cannot be given a timeout (a slow name server would hold the sender)."""
    answer: list[Any] = []

    def look() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except Exception as exc:  # handed to the caller, raised there
            answer.append(exc)

    lookup = threading.Thread(target=look, name="alert-webhook-dns", daemon=True)
    lookup.start()
    lookup.join(_left(deadline))
    if not answer:
        raise TimeoutError("timed out")
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to the address :func:`_connect` checked, every read and
    write by ``deadline``."""

    deadline: float

    def connect(self) -> None:
        sock = _connect(self.host, self.port, self.deadline)
        self.sock = _DeadlineSocket(sock, self.deadline)


class _PinnedTLS(http.client.HTTPSConnection):
    """As :class:`_Pinned` over TLS; the certificate is verified against the URL's
    host name (the default context checks both chain and name)."""

    deadline: float

    def connect(self) -> None:
        sock = _connect(self.host, self.port, self.deadline)
        try:
            sock.settimeout(_left(self.deadline))  # the handshake, as a whole
            tls = ssl.create_default_context().wrap_socket(
                sock, server_hostname=self.host
            )
        except BaseException:
            sock.close()
            raise
        self.sock = _DeadlineSocket(tls, self.deadline)


class _DeadlineSocket:
    """A connected socket whose every send and receive waits at most what is left
    until ``deadline``: a plain socket timeout starts again at each read, so a
    receiver dripping a byte every few seconds would hold the sender for minutes.
    What :mod:`http.client` uses of a socket: ``sendall``, ``makefile``, ``close``."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self.sock.settimeout(_left(self.deadline))
            view = view[self.sock.send(view) :]

    def recv_into(self, buffer: Any) -> int:
        self.sock.settimeout(_left(self.deadline))
        return self.sock.recv_into(buffer)

    def makefile(self, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        self.sock.close()


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket) -> None:
        self.sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.sock.recv_into(buffer)
