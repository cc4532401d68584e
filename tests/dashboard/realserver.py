"""A real Daphne server in a subprocess for the memory tests (issue 21): started on the
embedded default (SQLite under a temporary var dir: ``dashtest.embedded_daphne``), its
peak RSS read with psutil while a request runs, and raw HTTP sent over a socket so
that nothing on the client side buffers or retries."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import psutil
from dashtest import ROOT, embedded_env  # noqa: F401  (the env of a server, for callers)
from dashtest import embedded_daphne as daphne  # noqa: F401  (port, its process)

MB = 1 << 20


def manage(env: dict[str, str], *args: str) -> str:
    """Run ``manage.py`` with ``env``; its stdout."""
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout


def rss_mb(proc: psutil.Process) -> float:
    return proc.memory_info().rss / MB


class PeakRss:
    """The largest RSS of ``proc`` while the block runs, sampled every few ms, and
    the CPU seconds ``proc`` spent in it (server time: a loaded machine stretches the
    wall clock, not this)."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.before = rss_mb(proc)
        self.peak = self.before
        self._cpu0 = cpu_s(proc)
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.proc))
            time.sleep(0.002)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.05)
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb(self.proc))
        self.cpu_s = cpu_s(self.proc) - self._cpu0
        print(f"server: peak RSS growth {self.growth:.1f} MB, CPU {self.cpu_s:.3f} s")

    @property
    def growth(self) -> float:
        return self.peak - self.before


def cpu_s(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` so far."""
    times = proc.cpu_times()
    return times.user + times.system


def head(path: str, length: int | None, extra: str = "", **hdrs: str) -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    more = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in hdrs.items())
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{size}{extra}{more}"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n\r\n"
    ).encode()


def request(port: int, raw: bytes, timeout: float = 60) -> tuple[int, bytes, float]:
    """Send one whole request; (status, body, seconds from the last byte sent to the
    whole answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        start = time.monotonic()
        answer = b""
        while True:
            more = sock.recv(1 << 16)
            if not more:
                break
            answer += more
            if _complete(answer):
                break
    seconds = time.monotonic() - start
    head_, _, body = answer.partition(b"\r\n\r\n")
    status = int(head_.split(b" ", 2)[1]) if head_ else 0
    return status, body, seconds


def _complete(answer: bytes) -> bool:
    head_, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head_.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False
