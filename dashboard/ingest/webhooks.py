"""Alert notifications: every alert stored for a run is POSTed, as JSON, to its
owner's webhook (``AccountSettings.webhook_url``, set on ``/settings/``).

Off the request path: the write path (:func:`dashboard.ingest.writer.write`, in the
Celery worker's sink or the events API) only queues the notification after its
transaction commits; one daemon thread per process sends them, each POST bounded by
``ALERT_WEBHOOK_TIMEOUT_S``. A failure (refused, timed out, a non-2xx answer) is
logged and recorded on the settings' ``last_delivery``, never raised: an event write
never fails or waits because a receiver is down. The queue is bounded
(:data:`MAX_QUEUED`; past it a notification is dropped and logged), and a process
that stops loses what it had not sent yet.

The body: ``{"event": "alert", "run": {"id", "name", "url"}, "step", "detector",
"severity", "message", "evidence_url", "trajectories": [{"group", "index", "why",
"url"}]}``, links starting with ``DASHBOARD_URL``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard import jsonsafe
from dashboard.models import AccountSettings, Alert, Run

log = logging.getLogger(__name__)
MAX_QUEUED = 1000
_queue: queue.Queue[tuple[Any, str, dict[str, Any]]] = queue.Queue(MAX_QUEUED)
_lock = threading.Lock()
_thread: threading.Thread | None = None


def notify_on_commit(run_id: Any, alerts: Iterable[Alert]) -> None:
    """Queue a notification of each of ``alerts`` (rows just stored for
    ``run_id``) once the caller's transaction commits, if the owner has a webhook."""
    alerts = list(alerts)
    if not alerts:
        return
    found = (
        Run.objects.filter(pk=run_id)
        .values_list("name", "owner_id", "owner__account_settings__webhook_url")
        .first()
    )
    if found is None or not found[2]:
        return
    name, owner_id, url = found
    payloads = [payload(run_id, name, a) for a in alerts]
    transaction.on_commit(lambda: _enqueue(owner_id, url, payloads))


def payload(run_id: Any, run_name: str, alert: Alert) -> dict[str, Any]:
    base = f"{settings.DASHBOARD_URL}/runs/{run_id}/"
    return jsonsafe.clean(
        {
            "event": "alert",
            "run": {"id": str(run_id), "name": run_name, "url": base},
            "step": alert.step,
            "detector": alert.detector,
            "severity": alert.severity,
            "message": alert.message,
            "evidence_url": f"{base}#alert-{alert.detector}-{alert.step}",
            "trajectories": [
                {
                    "group": t.get("group"),
                    "index": t.get("index"),
                    "why": t.get("why", ""),
                    "url": f"{base}trajectories/{alert.step}/{t.get('group')}/"
                    f"{t.get('index')}/",
                }
                for t in alert.trajectories or []
                if isinstance(t, dict)
            ],
        }
    )


def _enqueue(owner_id: Any, url: str, payloads: list[dict[str, Any]]) -> None:
    _start()
    for body in payloads:
        try:
            _queue.put_nowait((owner_id, url, body))
        except queue.Full:
            log.warning(
                "alert webhook: %d notifications waiting; dropped %s at step %s of run %s",
                MAX_QUEUED, body["detector"], body["step"], body["run"]["id"],
            )  # fmt: skip


def _start() -> None:
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(
                target=_send_forever, name="alert-webhooks", daemon=True
            )
            _thread.start()


def _send_forever() -> None:
    while True:
        owner_id, url, body = _queue.get()
        try:
            result = deliver(url, body)
            _record(owner_id, body, result)
        except Exception:  # never let one notification stop the sender
            log.exception("alert webhook: sending to %s", _host(url))
        finally:
            _queue.task_done()


def deliver(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to ``url``; ``{"ok", "status"}`` or ``{"ok": False, "error"}``,
    the failure logged. Never raises for the receiver's sake."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "agentic-rl-dashboard (alert webhook)",
        },
    )
    try:
        with urllib.request.urlopen(
            request, timeout=settings.ALERT_WEBHOOK_TIMEOUT_S
        ) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad URL
        log.warning(
            "alert webhook to %s failed (run %s, %s at step %s): %s",
            _host(url), body["run"]["id"], body["detector"], body["step"], exc,
        )  # fmt: skip
        return {"ok": False, "error": str(exc)[:300]}
    if not 200 <= status < 300:
        log.warning(
            "alert webhook to %s answered %s (run %s, %s at step %s)",
            _host(url), status, body["run"]["id"], body["detector"], body["step"],
        )  # fmt: skip
    return {"ok": 200 <= status < 300, "status": status}


def _host(url: str) -> str:
    """The URL without its path and query (which may hold a secret) for the log."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _record(owner_id: Any, body: dict[str, Any], result: dict[str, Any]) -> None:
    from django.db import DatabaseError, connection

    try:
        AccountSettings.objects.filter(user_id=owner_id).update(
            last_delivery={
                **result,
                "at": timezone.now().isoformat(),
                "run": body["run"]["id"],
                "detector": body["detector"],
                "step": body["step"],
            }
        )
    except DatabaseError:
        log.warning("alert webhook: could not record the delivery", exc_info=True)
    finally:
        connection.close()  # this thread's connection, between notifications


def drain(timeout: float = 10.0) -> bool:
    """Wait until every queued notification was sent (tests, shutdown); False when
    ``timeout`` seconds passed first."""
    deadline = time.monotonic() + timeout
    while _queue.unfinished_tasks:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
