"""``HttpSink``: streams events to a dashboard over HTTP, never holding training up.

``emit`` encodes the event (:func:`trainer.events.encode_event`, the lines of
``events.jsonl``) and appends it to a bounded in-memory buffer; past
``max_buffer_bytes`` the buffer and every later event go to the on-disk spool
(:mod:`trainer.spool`) instead of RAM. A background thread sends batches (by count,
bytes and time) as gzipped NDJSON to ``POST {url}/api/runs/{id}/events``, oldest
first: the spool, then the buffer.

What each answer does (the protocol the dashboard speaks):

* 200: delivered. The server dedupes, so a batch sent twice is stored once.
* connection error, 408, 429, 5xx: the batch and the buffer go to the spool (the
  dashboard is unreachable: keep events on disk, not in RAM) and the thread retries
  the head of the spool with capped exponential backoff and jitter.
* 413: the batch is split in halves and each half sent; one line alone too large is
  rejected like a 400.
* 400 (and other 4xx): the batch is written to ``rejected-*.jsonl`` in the spool
  directory, the server's errors are logged, and sending goes on.
* 409 for a finished run: refused like a 400 (the run must be reopened first).
* 401, 403, 404: the token or run is refused; sending stops with a logged message,
  and every event from then on stays in the spool for a later
  ``python -m trainer import SPOOL_DIR``.

``close(timeout)`` flushes; what is not delivered by then stays spooled, and the log
says where. Without ``run_id`` the run is created (``POST /api/runs/external``) on
first use; with one, the run is continued: ``POST /api/runs/{id}/reopen`` first (a
finished run takes events again; a running one is unchanged). Pure: no Django.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from trainer.events import encode_event
from trainer.spool import Spool

log = logging.getLogger("trainer.httpsink")

MAX_LINES = 5000  # the server's per-request limits
MAX_BODY = 4 << 20
RETRY = "retry"
FATAL = "fatal"
DONE = "done"


FRAMEWORK = "agentic-rl"  # what a run of this trainer says made it


class HttpSink:
    def __init__(
        self,
        url: str,
        token: str,
        run_id: str | None = None,
        *,
        name: str | None = None,
        framework: str = FRAMEWORK,
        config: dict[str, Any] | None = None,
        spool_dir: str | Path | None = None,
        batch_events: int = 1000,
        batch_bytes: int = 1 << 20,
        flush_interval_s: float = 2.0,
        max_buffer_bytes: int = 16 << 20,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        request_timeout_s: float = 30.0,
        on_run_id: Callable[[str], None] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.run_id = run_id
        # A run given by id is being continued (a resume, an import into it): if it
        # finished, the dashboard refuses its events until it is reopened.
        self._reopen = run_id is not None
        self.name = name or "run"
        self.framework = framework
        self.config = config or {}
        self.batch_events = max(1, min(batch_events, MAX_LINES))
        self.batch_bytes = max(1, batch_bytes)
        self.flush_interval_s = flush_interval_s
        self.max_buffer_bytes = max_buffer_bytes
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.on_run_id = on_run_id
        if spool_dir is None:
            spool_dir = tempfile.mkdtemp(prefix="httpsink-spool-")
        self.spool_dir = Path(spool_dir)
        self.stats = {"accepted": 0, "duplicates": 0, "rejected": 0, "retries": 0}
        self.error: str | None = None  # set when sending stopped for good
        self._spool = Spool(self.spool_dir)
        self._buf: deque[str] = deque()
        self._buf_bytes = 0
        self._oldest = 0.0  # monotonic time the oldest buffered line arrived
        self._disk_mode = False  # buffer overflowed: new events go to the spool
        self._inflight: list[str] | None = None  # a buffer batch being sent
        self._closing = False
        self._abandoned = False
        self._attempt = 0
        self._rejects = 0
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._client = httpx.Client(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(request_timeout_s),
        )
        self._thread = threading.Thread(target=self._run, name="HttpSink", daemon=True)
        self._thread.start()

    # -- the training side -----------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        self.emit_line(encode_event(event))

    def emit_line(self, line: str) -> None:
        """An event already encoded by :func:`trainer.events.encode_event` (a
        ``TeeSink`` encodes once for every sink that writes lines)."""
        with self._lock:
            if self._closing:
                raise RuntimeError("HttpSink.emit after close()")
            if self._disk_mode or self.error is not None:
                self._spool.append([line])
                self._wake.notify()
                return
            if self._buf_bytes + len(line) > self.max_buffer_bytes:
                # Memory bound: the buffer (older) and this line go to disk, in order.
                self._spool_buffer([line])
                self._wake.notify()
                return
            first = not self._buf
            if first:  # the sender starts its flush_interval_s clock
                self._oldest = time.monotonic()
            self._buf.append(line)
            self._buf_bytes += len(line) + 1
            full = (
                len(self._buf) >= self.batch_events
                or self._buf_bytes >= self.batch_bytes
            )
            if first or full:
                self._wake.notify()

    @property
    def buffered_bytes(self) -> int:
        """Bytes held in RAM (the buffer and a batch in flight)."""
        with self._lock:
            inflight = sum(len(x) + 1 for x in self._inflight or ())
            return self._buf_bytes + inflight

    def close(self, timeout: float = 60.0) -> None:
        """Delivers everything within ``timeout`` seconds; the rest stays spooled."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout)
        with self._lock:
            if self._thread.is_alive():
                self._abandoned = True
                if self._inflight is not None:
                    self._spool.prepend(self._inflight)
                self._spool_buffer([])
            left = self._spool.count_lines() if self._spool.pending() else 0
            self._spool.close()
        if left:
            log.warning(
                "HttpSink: %d events were not delivered to %s; they are kept in %s "
                "(replay: python -m trainer import %s --report-to %s)",
                left,
                self.url,
                self.spool_dir,
                self.spool_dir,
                self.url,
            )
        self._client.close()

    # -- the sending thread ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                batch, offset = self._next_batch()
                if batch is None:
                    return
            if self.run_id is None and not self._create_run(batch, offset):
                continue
            if self._reopen and not self._reopen_run(batch, offset):
                continue
            outcome = self._deliver(batch) if batch else DONE
            with self._lock:
                if self._abandoned:
                    return
                self._settle(batch, offset, outcome)
            if outcome == FATAL:
                return
            if outcome == RETRY:
                self._backoff()

    def _next_batch(self) -> tuple[list[str] | None, int | None]:
        """Under the lock: waits for work; (None, _) means stop. ``offset`` is the spool
        offset to commit, or None for a batch taken from the buffer."""
        while True:
            if self._abandoned or self.error is not None:
                return None, None
            if self._spool.pending():
                lines, offset = self._spool.read(self.batch_events, self.batch_bytes)
                return lines, offset
            self._disk_mode = False  # the spool is drained: back to RAM
            due = self._oldest + self.flush_interval_s - time.monotonic()
            full = (
                len(self._buf) >= self.batch_events
                or self._buf_bytes >= self.batch_bytes
            )
            if self._buf and (full or due <= 0 or self._closing):
                return self._take_buffer(), None
            if not self._buf and self._closing:
                return None, None
            self._wake.wait(timeout=due if self._buf else None)

    def _take_buffer(self) -> list[str]:
        batch: list[str] = []
        size = 0
        while self._buf and len(batch) < self.batch_events:
            line = self._buf[0]
            if batch and size + len(line) + 1 > self.batch_bytes:
                break
            batch.append(self._buf.popleft())
            size += len(line) + 1
        self._buf_bytes -= size
        self._oldest = time.monotonic()
        self._inflight = batch
        return batch

    def _spool_buffer(self, extra: list[str]) -> None:
        """Under the lock: the buffer, then ``extra``, to the spool's tail."""
        self._spool.append([*self._buf, *extra])
        self._buf.clear()
        self._buf_bytes = 0
        self._disk_mode = True

    def _settle(self, batch: list[str], offset: int | None, outcome: str) -> None:
        """Under the lock: records what happened to a batch."""
        from_buffer = offset is None
        self._inflight = None
        if outcome == DONE:
            self._attempt = 0
            if not from_buffer:
                self._spool.commit(offset)
            return
        if from_buffer:  # keep it, and what queued behind it, on disk from now on
            self._spool.prepend(batch)
            self._spool_buffer([])
        if outcome == RETRY:
            self._attempt += 1
            self.stats["retries"] += 1

    def _backoff(self) -> None:
        delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (self._attempt - 1))
        delay *= random.uniform(0.5, 1.0)  # jitter: senders do not retry in lockstep
        deadline = time.monotonic() + delay
        with self._lock:  # emit() notifies too: wait out the whole delay
            while not self._abandoned and (left := deadline - time.monotonic()) > 0:
                self._wake.wait(timeout=left)

    def _create_run(self, batch: list[str], offset: int | None) -> bool:
        body = {"name": self.name, "framework": self.framework, "config": self.config}
        outcome, answer = self._post("/api/runs/external", json=body)
        if outcome == DONE:
            try:
                self.run_id = str(answer.json()["id"])
            except (ValueError, KeyError, TypeError):
                outcome = self._stop(
                    f"run creation answered without an id: {answer.text[:200]}"
                )
            else:
                log.info("HttpSink: created run %s at %s", self.run_id, self.url)
                if self.on_run_id is not None:
                    self.on_run_id(self.run_id)
                return True
        elif outcome != RETRY:
            outcome = self._stop(
                f"the dashboard refused to create the run ({_describe(answer)})"
            )
        return self._not_sent(batch, offset, outcome)

    def _not_sent(self, batch: list[str], offset: int | None, outcome: str) -> bool:
        """A batch held back by a failed call before it (create, reopen): settled as
        ``outcome``, backing off before a retry. False: go round again."""
        with self._lock:
            if not self._abandoned:
                self._settle(batch, offset, outcome)
        if outcome == RETRY:
            self._backoff()
        return False

    def _reopen_run(self, batch: list[str], offset: int | None) -> bool:
        """``POST /api/runs/{id}/reopen`` once, before the first batch."""
        outcome, answer = self._post(f"/api/runs/{self.run_id}/reopen")
        if outcome == DONE:
            self._reopen = False
            return True
        if outcome != RETRY:
            outcome = self._stop(
                f"the dashboard refused to reopen run {self.run_id} "
                f"({_describe(answer)})"
            )
        return self._not_sent(batch, offset, outcome)

    def _deliver(self, batch: list[str]) -> str:
        """Sends one batch (split on 413); DONE, RETRY or FATAL."""
        body = "".join(line + "\n" for line in batch).encode("utf-8")
        data = gzip.compress(body, compresslevel=5)
        if len(data) > MAX_BODY and len(batch) > 1:
            return self._split(batch)
        outcome, answer = self._post(
            f"/api/runs/{self.run_id}/events",
            content=data,
            headers={
                "Content-Type": "application/x-ndjson",
                "Content-Encoding": "gzip",
            },
        )
        if outcome == DONE:
            counts = _json(answer)
            self.stats["accepted"] += int(counts.get("accepted", 0))
            self.stats["duplicates"] += int(counts.get("duplicates", 0))
            return DONE
        if outcome == RETRY:
            return RETRY
        status = answer.status_code
        if status == 413 and len(batch) > 1:
            return self._split(batch)
        if status in (401, 403, 404):
            return self._stop(f"the dashboard refused the events ({_describe(answer)})")
        self._reject(batch, answer)
        return DONE

    def _split(self, batch: list[str]) -> str:
        half = len(batch) // 2
        for part in (batch[:half], batch[half:]):
            outcome = self._deliver(part)
            if outcome != DONE:
                return outcome
        return DONE

    def _post(self, path: str, **kwargs: Any) -> tuple[str, httpx.Response | None]:
        try:
            answer = self._client.post(self.url + path, **kwargs)
        except httpx.HTTPError as exc:
            if self._attempt == 0:
                log.warning("HttpSink: %s unreachable (%s); spooling", self.url, exc)
            return RETRY, None
        if answer.status_code < 300:
            return DONE, answer
        if answer.status_code in (408, 429) or answer.status_code >= 500:
            if self._attempt == 0:
                log.warning("HttpSink: %s; spooling and retrying", _describe(answer))
            return RETRY, answer
        return "refused", answer

    def _stop(self, why: str) -> str:
        self.error = why
        log.error(
            "HttpSink: %s. Sending stopped; every event of this run is kept in %s: "
            "replay it with `python -m trainer import %s --report-to URL` once fixed.",
            why,
            self.spool_dir,
            self.spool_dir,
        )
        return FATAL

    def _reject(self, batch: list[str], answer: httpx.Response) -> None:
        self._rejects += 1
        stamp = time.strftime("%Y%m%dT%H%M%S")
        path = self.spool_dir / f"rejected-{stamp}-{self._rejects}.jsonl"
        path.write_text("".join(line + "\n" for line in batch), encoding="utf-8")
        self.stats["rejected"] += len(batch)
        errors = _json(answer).get("errors") or []
        log.error(
            "HttpSink: the dashboard rejected %d events (%s); they are saved in %s%s",
            len(batch),
            _describe(answer),
            path,
            "".join(f"\n  {e}" for e in errors[:20]),
        )


def _json(answer: httpx.Response | None) -> dict[str, Any]:
    try:
        data = answer.json() if answer is not None else {}
    except (ValueError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(answer: httpx.Response | None) -> str:
    if answer is None:
        return "no answer"
    detail = _json(answer).get("detail") or answer.text[:200]
    return f"HTTP {answer.status_code}: {detail}"
