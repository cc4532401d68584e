"""Publishing frames to a run's channel group, from plain (non-async) threads.

The database is the source of truth; this is a best-effort notification path.
channels-redis drops a message silently when a socket's channel is full, and a
broker outage makes ``group_send`` fail: both only cost the browser a backfill
(frames carry a ``seq``; a gap means "fetch ``/api/runs/<id>/backfill``").

Two loops matter:

* channels-redis keeps one connection pool per event loop, so publishing goes
  through one long-lived loop in a daemon thread instead of a fresh loop per call.
* The in-memory layer (embedded mode) uses ``asyncio.Queue`` objects that belong to
  the server's loop and are not thread-safe, so frames are handed to *that* loop
  (recorded by :func:`remember_server_loop` from the ASGI app) with
  ``run_coroutine_threadsafe``. Before the server has seen a request nobody can be
  listening, so frames are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

log = logging.getLogger(__name__)

_lock = threading.Lock()
_server_loop: asyncio.AbstractEventLoop | None = None
_own_loop: asyncio.AbstractEventLoop | None = None
PUBLISH_TIMEOUT_S = 5.0


def group_name(run_id: Any) -> str:
    return f"run-{run_id}"


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _server_loop
    _server_loop = loop


def _publisher_loop(layer: Any) -> asyncio.AbstractEventLoop | None:
    global _own_loop
    if isinstance(layer, InMemoryChannelLayer):
        loop = _server_loop
        return loop if loop is not None and not loop.is_closed() else None
    with _lock:
        if _own_loop is None or _own_loop.is_closed():
            _own_loop = asyncio.new_event_loop()
            threading.Thread(
                target=_own_loop.run_forever, name="frame-publisher", daemon=True
            ).start()
        return _own_loop


def publish(run_id: Any, text: str) -> bool:
    """Send one encoded frame to the run's group. Never raises; False when dropped."""
    layer = get_channel_layer()
    if layer is None:
        return False
    loop = _publisher_loop(layer)
    if loop is None:
        return False
    message = {"type": "run.frame", "text": text}
    try:
        fut = asyncio.run_coroutine_threadsafe(
            layer.group_send(group_name(run_id), message), loop
        )
    except RuntimeError as exc:  # the loop was closed under us
        log.warning("frame for run %s not published: %r", run_id, exc)
        return False
    try:
        fut.result(timeout=PUBLISH_TIMEOUT_S)
        return True
    except Exception as exc:  # broker down, timeout...: the DB still has everything
        fut.cancel()
        log.warning("frame for run %s not published: %r", run_id, exc)
        return False
