"""Alert webhooks against hostile or broken receivers: an answer that is not HTTP is a
failed try of that delivery alone (the others in the pass are still sent); a receiver
dripping its answer is cut off at ``ALERT_WEBHOOK_TIMEOUT_S`` for the whole request;
loopback, private and link-local destinations are refused unless
``ALERT_WEBHOOK_ALLOW_PRIVATE``, checked on the address connected to; HTTPS still
verifies the certificate against the URL's host name. The receivers are local TCP
servers started here."""

from __future__ import annotations

import contextlib
import datetime
import socket
import ssl
import threading
import time
from collections.abc import Callable

import pytest
from django.utils import timezone

from dashboard.errors import InvalidConfig
from dashboard.ingest import webhooks
from dashboard.models import AccountSettings, Alert, Run, WebhookDelivery
from dashboard.site import account
from tests.dashboard.dashtest import client_for

pytestmark = pytest.mark.django_db(transaction=True)


class Server:
    """A TCP server on 127.0.0.1 calling ``handle(conn, server)`` for each
    connection, in a thread of its own; ``requests`` holds the first bytes each sent."""

    def __init__(self, handle: Callable[[socket.socket, Server], None]) -> None:
        self.handle = handle
        self.requests: list[bytes] = []
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        # OSError: the client gave up, which is what a deadline is for.
        with conn, contextlib.suppress(OSError):
            self.handle(conn, self)

    def read_request(self, conn: socket.socket) -> bytes:
        """The whole request, its body too: a server closing with bytes unread
        resets the connection, which the client may see before the answer."""
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < self._length(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        self.requests.append(data)
        return data

    @staticmethod
    def _length(data: bytes) -> int:
        head, _, _ = data.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                return len(head) + 4 + int(line.split(b":")[1])
        return 0

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def serve():
    servers: list[Server] = []

    def start(handle):
        servers.append(Server(handle))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def answering(raw: bytes):
    def handle(conn, server):
        server.read_request(conn)
        conn.sendall(raw)

    return handle


def dripping(first: bytes, every_s: float = 0.2):
    """Sends ``first``, then one byte every ``every_s`` seconds for 30 s: each read
    gets something well within any per-read timeout."""

    def handle(conn, server):
        server.read_request(conn)
        conn.sendall(first)
        until = time.monotonic() + 30
        while not server.stop.is_set() and time.monotonic() < until:
            time.sleep(every_s)
            conn.sendall(b"x")

    return handle


OK_204 = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
NOT_HTTP = {
    "garbage": b"garbage\n",
    "SSH banner": b"SSH-2.0-OpenSSH_9.6\r\n",
    "a status line too long": b"HTTP/1.1 200 " + b"x" * 70_000 + b"\r\n\r\n",
    "too many headers": b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n",
}


def url_of(server: Server, host: str = "127.0.0.1", path: str = "/hook") -> str:
    return f"http://{host}:{server.port}{path}"


def due(user, step: int, minutes_ago: int) -> WebhookDelivery:
    run = Run.objects.create(name=f"r{step}", owner=user, config={}, status="running")
    body = webhooks.payload(run.pk, run.name, Alert(step=step, detector="repetition"))
    past = timezone.now() - datetime.timedelta(minutes=minutes_ago)
    return WebhookDelivery.objects.create(user=user, body=body, next_at=past)


def use_webhook(user, url):
    AccountSettings.objects.update_or_create(user=user, defaults={"webhook_url": url})


@pytest.fixture
def resolving(monkeypatch):
    """``resolving({"hooks.example.org": "127.0.0.1"})``: those names resolve so,
    every other lookup as it would."""
    real = socket.getaddrinfo

    def install(names: dict[str, str]):
        def fake(host, port, *args, **kwargs):
            if host in names:
                addr = (names[host], port)
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", addr)]
            return real(host, port, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", fake)

    return install


# --- answers that are not HTTP ----------------------------------------------------------
@pytest.mark.parametrize("answer", NOT_HTTP.values(), ids=NOT_HTTP.keys())
def test_an_answer_that_is_not_http_is_a_failed_test_not_a_500(
    owner, serve, settings, answer
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    server = serve(answering(answer))
    r = client_for(owner).post(
        "/settings/", {"webhook_url": url_of(server), "action": "test"}
    )
    assert r.status_code == 200
    html = r.content.decode()
    assert "data-webhook-test-result" in html and "failed: " in html
    assert "not an HTTP answer" in html


def test_a_receiver_that_is_not_http_does_not_stop_others_deliveries(
    owner, other, serve, settings
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    garbage = serve(answering(NOT_HTTP["garbage"]))
    good = serve(answering(OK_204))
    use_webhook(owner, url_of(garbage))
    use_webhook(other, url_of(good))
    bad = due(owner, 3, minutes_ago=5)  # first in the pass
    fine = due(other, 4, minutes_ago=1)
    assert webhooks.send_due() == 2
    bad.refresh_from_db()
    fine.refresh_from_db()
    assert (bad.status, bad.attempts) == ("pending", 1)  # counted, retried later
    assert "not an HTTP answer (BadStatusLine" in bad.last_result["error"]
    assert "\n" not in bad.last_result["error"] and bad.last_result["retry_at"]
    assert AccountSettings.objects.get(user=owner).last_delivery["ok"] is False
    assert (fine.status, fine.attempts) == ("delivered", 1)
    assert len(good.requests) == 1


def test_a_try_that_raises_anyway_counts_and_stops_no_one(
    owner, other, serve, settings, monkeypatch, caplog
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    good = serve(answering(OK_204))
    use_webhook(owner, "https://hooks.example.org/broken")
    use_webhook(other, url_of(good))
    real = webhooks.deliver

    def deliver(url, body):
        if "broken" in url:
            raise RuntimeError("a bug")
        return real(url, body)

    monkeypatch.setattr(webhooks, "deliver", deliver)
    bad = due(owner, 3, minutes_ago=5)
    fine = due(other, 4, minutes_ago=1)
    with caplog.at_level("WARNING", logger="dashboard.ingest.webhooks"):
        assert webhooks.send_due() == 2
    bad.refresh_from_db()
    fine.refresh_from_db()
    assert (bad.status, bad.attempts) == ("pending", 1)
    assert bad.last_result["error"] == "could not be sent (RuntimeError: a bug)"
    assert fine.status == "delivered"
    assert any("RuntimeError" in m for m in caplog.messages)


# --- a receiver too slow ------------------------------------------------------------------
@pytest.mark.parametrize(
    "first", [b"", b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 200 OK\r\nX-Slow: "]
)
def test_a_dripping_receiver_is_cut_off_at_the_deadline(owner, serve, settings, first):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    settings.ALERT_WEBHOOK_TIMEOUT_S = 1
    server = serve(dripping(first))
    started = time.monotonic()
    r = client_for(owner).post(
        "/settings/", {"webhook_url": url_of(server), "action": "test"}
    )
    assert time.monotonic() - started < 10  # the drip goes on for 30 s
    assert r.status_code == 200
    assert "the receiver was too slow: timed out after 1 s" in r.content.decode()


def test_a_dripping_receiver_holds_the_sender_no_longer_than_the_deadline(
    owner, serve, settings
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    settings.ALERT_WEBHOOK_TIMEOUT_S = 1
    use_webhook(owner, url_of(serve(dripping(b"HTTP/1.1 200 OK\r\n"))))
    d = due(owner, 3, minutes_ago=1)
    started = time.monotonic()
    assert webhooks.send_due() == 1
    assert time.monotonic() - started < 10
    d.refresh_from_db()
    assert (d.status, d.attempts) == ("pending", 1)  # a slow receiver is retried
    assert "too slow" in d.last_result["error"]


# --- addresses refused ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("::ffff:7f00:1", "a loopback address"),
        ("::ffff:10.1.2.3", "a private address"),
        ("::ffff:169.254.169.254", "a link-local address"),
        ("169.254.169.254", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("fe80::1%eth0", "a link-local address"),
        ("10.0.0.1", "a private address"),
        ("192.168.1.1", "a private address"),
        ("fc00::1", "a private address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("::ffff:0.0.0.0", "an unspecified address"),
        ("64:ff9b::a00:1", "a private address"),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", "a loopback address"),  # 6to4 of 127.0.0.1
        ("100.64.0.1", "not a public address"),  # carrier-grade NAT
    ],
)
def test_an_address_not_public_is_named(address, kind):
    assert account.address_problem(address) == kind


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "2606:4700:4700::1111",
        "::ffff:93.184.216.34",
        "64:ff9b::808:808",
    ],
)
def test_a_public_address_passes(address):
    assert account.address_problem(address) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8124/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.5/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://localhost:8000/",
        "http://0.0.0.0:1/",
    ],
)
def test_saving_an_address_not_public_is_refused_naming_the_field_and_the_setting(
    url, settings
):
    with pytest.raises(InvalidConfig) as refused:
        account.check_webhook_url(url)
    [error] = refused.value.errors
    assert error.startswith("webhook_url: ") and "ALERT_WEBHOOK_ALLOW_PRIVATE" in error
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    assert account.check_webhook_url(url) == url


def test_send_a_test_to_loopback_is_refused_by_default(owner, serve):
    server = serve(answering(OK_204))
    r = client_for(owner).post(
        "/settings/", {"webhook_url": url_of(server), "action": "test"}
    )
    assert r.status_code == 400
    html = r.content.decode()
    assert "webhook_url: 127.0.0.1 is a loopback address" in html
    assert "ALERT_WEBHOOK_ALLOW_PRIVATE" in html and server.requests == []


def test_a_name_resolving_to_loopback_is_refused_when_sending(owner, serve, resolving):
    server = serve(answering(OK_204))
    resolving({"hooks.example.org": "127.0.0.1"})
    url = url_of(server, host="hooks.example.org")
    assert account.check_webhook_url(url) == url  # a name is not looked up on save
    r = client_for(owner).post("/settings/", {"webhook_url": url, "action": "test"})
    assert r.status_code == 200 and server.requests == []
    assert (
        "failed: webhook_url: hooks.example.org resolves to 127.0.0.1, a loopback "
        "address" in r.content.decode()
    )
    # Saved, then delivered: refused at once, not retried.
    use_webhook(owner, url)
    d = due(owner, 3, minutes_ago=1)
    assert webhooks.send_due() == 1
    d.refresh_from_db()
    assert (d.status, d.attempts) == ("failed", 1) and server.requests == []
    assert "ALERT_WEBHOOK_ALLOW_PRIVATE" in d.last_result["error"]


def test_the_setting_allows_loopback_and_the_host_header_is_the_urls(
    owner, serve, settings, resolving
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    server = serve(answering(OK_204))
    resolving({"hooks.example.org": "127.0.0.1"})
    result = webhooks.send_test(owner, url_of(server, "hooks.example.org", "/h?k=s"))
    assert result == {"ok": True, "status": 204}
    [request] = server.requests
    assert request.startswith(b"POST /h?k=s HTTP/1.1\r\n")
    assert f"Host: hooks.example.org:{server.port}\r\n".encode() in request


# --- HTTPS ----------------------------------------------------------------------------------
@pytest.fixture
def tls_server(serve, tmp_path):
    """An HTTPS receiver whose certificate (self-signed) names hooks.example.org;
    ``.ca`` is the file to trust it by."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.example.org")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("hooks.example.org")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = tmp_path / "cert.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile = tmp_path / "key.pem"
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem, keyfile)

    def handle(conn, server):
        conn.settimeout(5)
        with context.wrap_socket(conn, server_side=True) as tls:
            server.read_request(tls)
            tls.sendall(OK_204)

    server = serve(handle)
    server.ca = str(pem)
    return server


def trusting(monkeypatch, cafile: str) -> None:
    real = ssl.create_default_context
    monkeypatch.setattr(
        ssl, "create_default_context", lambda *a, **k: real(cafile=cafile)
    )


def test_https_still_verifies_the_certificate(owner, tls_server, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    url = f"https://127.0.0.1:{tls_server.port}/hook"
    result = webhooks.send_test(owner, url)
    assert result["ok"] is False and "CERTIFICATE_VERIFY_FAILED" in result["error"]


def test_https_to_a_pinned_address_checks_the_urls_host_name(
    owner, tls_server, settings, resolving, monkeypatch
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    trusting(monkeypatch, tls_server.ca)
    resolving({"hooks.example.org": "127.0.0.1", "other.example.org": "127.0.0.1"})
    good = f"https://hooks.example.org:{tls_server.port}/hook"
    assert webhooks.send_test(owner, good) == {"ok": True, "status": 204}
    wrong = f"https://other.example.org:{tls_server.port}/hook"
    result = webhooks.send_test(owner, wrong)
    assert result["ok"] is False and "other.example.org" in result["error"]


@pytest.mark.parametrize(
    "host",
    [
        "a" * 64 + ".example.org",  # a label past 63
        ".".join(["a" * 63] * 4) + ".org",  # 259 > 253 in all
    ],
)
def test_a_host_name_longer_than_dns_allows_is_refused_on_save(host):
    """A walk saved a 3,000-character host name ("Webhook saved"): no DNS name is
    that long, so no alert would ever arrive."""
    with pytest.raises(InvalidConfig) as refused:
        account.check_webhook_url(f"https://{host}/hook")
    assert refused.value.errors == [
        "webhook_url: the host name is longer than a DNS name can be "
        "(253 characters in all, 63 between dots)"
    ]
    longest = ".".join(["a" * 63] * 3) + "." + "a" * 61  # 253: still a name
    assert account.check_webhook_url(f"https://{longest}/") == f"https://{longest}/"
