"""RunSink: the trainer's sink on a worker. Buffers events, writes them in batches,
streams frames after each commit.

The trainer thread only appends to a buffer (``emit`` returns at once); one writer
thread per run does everything else:

* every ``RUN_FRAME_INTERVAL_MS`` (or sooner when the buffer is large) it writes the
  buffered events in one transaction: a fence on the run's lease (which is also the
  heartbeat), then idempotent inserts (``dashboard.ingest.writer``);
* after the commit it folds what was written into the next frame and publishes at
  most one frame per interval (coalescing: ~10 frames/s whatever the step rate);
* between writes it heartbeats every ``RUN_HEARTBEAT_SECONDS``.

Events are committed in the order they were emitted, so once a ``checkpoint`` row is
in the database every row of the steps before it is too; ``dashboard.runs.execution`` only
lets a resumed attempt start from a checkpoint the database knows about. ``emit``
blocks until everything so far is committed on ``checkpoint`` and ``run_finished``.
A ``run_started`` with ``start_step = S`` first deletes the rows at steps >= S left
by an attempt that died (they are about to be replayed). If the lease is lost, writes
stop, ``lost`` turns True and the trainer is told to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.utils import timezone

from dashboard.ingest import writer
from dashboard.ingest.fields import last_step_after
from dashboard.live import frames
from dashboard.live.frames import FrameParts
from dashboard.runs.lease import Claim, heartbeat, held_by

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    pass


class RunSink:
    def __init__(
        self,
        claim: Claim,
        *,
        interval_s: float = 0.1,
        heartbeat_s: float = 5.0,
        batch_rows: int = 20_000,
        max_pending_rows: int = 200_000,
    ) -> None:
        self.claim = claim
        self.interval_s = interval_s
        self.heartbeat_s = heartbeat_s
        self.batch_rows = batch_rows
        self.max_pending_rows = max_pending_rows
        self.lost = False
        self.dropped_batches = 0
        self.rows_written = 0
        self.frames_sent = 0
        self.last_step = 0
        self._cond = threading.Condition()
        self._pending: list[dict[str, Any]] = []
        self._pending_rows = 0
        self._emitted = 0
        self._written = 0
        self._sync_to = 0
        self._closing = False
        self._frame = FrameParts()
        self._thread = threading.Thread(
            target=self._run, name=f"sink-{claim.run_id}", daemon=True
        )
        self._thread.start()

    # --- trainer thread ---------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        if not isinstance(event, dict) or self.lost:
            return
        with self._cond:
            if self._closing:
                raise RuntimeError("emit() after close()")
            while self._pending_rows >= self.max_pending_rows and self._alive():
                self._cond.wait(0.5)  # backpressure: the database is behind
            self._pending.append(event)
            self._emitted += 1
            metrics = event.get("metrics")
            self._pending_rows += len(metrics) if isinstance(metrics, dict) else 1
            if self._must_sync(event):
                self._sync_to = self._emitted
                self._cond.notify_all()
                while self._written < self._sync_to and self._alive():
                    self._cond.wait(0.5)
            elif self._pending_rows >= self.batch_rows:
                self._cond.notify_all()

    def flush(self) -> None:
        """Block until everything emitted so far is committed (or the lease is lost)."""
        with self._cond:
            self._sync_to = self._emitted
            self._cond.notify_all()
            while self._written < self._sync_to and self._alive():
                self._cond.wait(0.5)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def _must_sync(self, event: dict[str, Any]) -> bool:
        return event.get("type") in ("checkpoint", "run_finished")

    def _alive(self) -> bool:
        return not self.lost and self._thread.is_alive()

    # --- writer thread ----------------------------------------------------------------
    def _run(self) -> None:
        last_write = last_touch = last_publish = time.monotonic()
        failures = 0
        try:
            while True:
                with self._cond:
                    events, write_due, wait_s = self._next_batch(last_write)
                    if not write_due and not self._closing:
                        publish_in = self.interval_s - (time.monotonic() - last_publish)
                        touch_in = self.heartbeat_s - (time.monotonic() - last_touch)
                        wait = min(
                            wait_s, touch_in, publish_in if self._frame else wait_s
                        )
                        if wait > 0:
                            self._cond.wait(wait)
                            events, write_due, _ = self._next_batch(last_write)
                    closing = self._closing
                now = time.monotonic()
                if write_due:
                    try:
                        self._write(events)
                        failures = 0
                    except LeaseLost:
                        self._lose()
                        return
                    except (
                        OperationalError,
                        InterfaceError,
                    ) as exc:  # connection trouble
                        failures += 1
                        log.warning(
                            "run %s: write failed (%r), retrying",
                            self.claim.run_id,
                            exc,
                        )
                        close_old_connections()
                        connection.close()
                        time.sleep(min(5.0, 0.2 * 2**failures))
                        continue
                    last_write = last_touch = now
                elif now - last_touch >= self.heartbeat_s:
                    if not self._heartbeat():
                        self._lose()
                        return
                    last_touch = now
                if self._frame and (closing or now - last_publish >= self.interval_s):
                    self._publish()
                    last_publish = time.monotonic()
                with self._cond:
                    if self._closing and not self._pending:
                        break
            if self._frame:
                self._publish()
        finally:
            with self._cond:
                self._cond.notify_all()
            connection.close()

    def _next_batch(
        self, last_write: float
    ) -> tuple[list[dict[str, Any]], bool, float]:
        """(events to write, whether to write now, seconds until a write is due)."""
        if not self._pending:
            return [], False, self.interval_s
        wait_s = self.interval_s - (time.monotonic() - last_write)
        due = (
            self._closing
            or wait_s <= 0
            or self._sync_to > self._written
            or self._pending_rows >= self.batch_rows
        )
        return list(self._pending), due, max(wait_s, 0.0)

    def _write(self, events: list[dict[str, Any]]) -> None:
        run_id = self.claim.run_id
        last_step = last_step_after(events, self.last_step)
        rows, parts = 0, FrameParts()
        try:
            with transaction.atomic():
                fence = {"heartbeat_at": timezone.now(), "last_step": last_step}
                if held_by(self.claim).update(**fence) != 1:
                    raise LeaseLost
                rows, parts = writer.store(run_id, events, attempt=self.claim.attempt)
        except (LeaseLost, OperationalError, InterfaceError):
            raise
        except Exception:  # a malformed event (DataError...) must not wedge the run
            log.exception("run %s: dropping a batch of %d events", run_id, len(events))
            self.dropped_batches += 1
        parts.last_step = last_step
        with self._cond:
            del self._pending[: len(events)]
            self._written += len(events)
            self._pending_rows = sum(
                len(e["metrics"]) if isinstance(e.get("metrics"), dict) else 1
                for e in self._pending
            )
            self._cond.notify_all()
        self.last_step = last_step
        self.rows_written += rows
        self._frame.merge(parts)

    def _heartbeat(self) -> bool:
        try:
            return heartbeat(self.claim)
        except (OperationalError, InterfaceError) as exc:
            log.warning("run %s: heartbeat failed: %r", self.claim.run_id, exc)
            connection.close()
            return True  # a database blip is not a lost lease; the reaper decides

    def _publish(self) -> None:
        parts, self._frame = self._frame, FrameParts()
        try:
            if frames.send(self.claim.run_id, parts):
                self.frames_sent += 1
        except (OperationalError, InterfaceError) as exc:
            log.warning("run %s: frame not sent: %r", self.claim.run_id, exc)

    def _lose(self) -> None:
        log.warning("run %s: lease lost; this worker stops writing", self.claim.run_id)
        with self._cond:
            self.lost = True
            self._pending.clear()
            self._pending_rows = 0
            self._cond.notify_all()
