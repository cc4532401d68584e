"""Alert notifications: every alert stored for a run is POSTed, as JSON, to its
owner's webhook (``AccountSettings.webhook_url``, set on ``/settings/``).

Durable and off the request path. The write path (:func:`dashboard.ingest.writer.
write`, in the Celery worker's sink or the events API) stores one
:class:`~dashboard.models.WebhookDelivery` per alert in the transaction that stores
the alert, and wakes this process's sender once it commits: a notification exists
exactly when its alert does, and a process that stops before sending it leaves it
for the next sender (every process that serves or works starts one, :func:`start`).

A sender claims a due delivery (a conditional UPDATE, so two processes never send
one at once; a claim lapses after ``ALERT_WEBHOOK_TIMEOUT_S`` + 30 s, freeing what a
dead sender held) and POSTs it to the owner's *current* URL (turned off since: not
sent). Each POST, from looking up the host to reading the answer's headers, ends
within ``ALERT_WEBHOOK_TIMEOUT_S`` as a whole, however slowly a receiver drips its
answer: one sender thread serves every user. The host is resolved once and the POST
goes to the address checked: loopback, private, link-local, multicast, reserved and
unspecified addresses are refused (else "Send a test" probes the server's own
network) unless ``ALERT_WEBHOOK_ALLOW_PRIVATE`` is set. A receiver that is down,
too slow, not HTTP, or answers 5xx, 408 or 429 is tried again after each delay of
``ALERT_WEBHOOK_RETRY_S`` (10 s, 1 min, 5 min, 30 min, 2 h), then the delivery is
``failed``; any other non-2xx answer, or an address refused, fails it at once. Every
try is logged (the URL's host only: a path or query may hold a secret) and recorded
on the delivery and as the settings' ``last_delivery``; a try that raises anyway is
a failed try of that delivery alone. Nothing is ever raised to the write, which never
waits for a receiver. Finished deliveries are kept ``KEEP_DAYS`` days (the list on
``/settings/``).

The body: ``{"event": "alert", "run": {"id", "name", "url"}, "step", "detector",
"severity", "message", "evidence_url", "trajectories": [{"group", "index", "why",
"url"}]}``, links starting with ``DASHBOARD_URL``; :func:`send_test` POSTs a
``{"event": "test", ...}`` of the same shape at once (the "Send a test" button).
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from dashboard import jsonsafe
from dashboard.ingest.webhook_http import Refused, host_of
from dashboard.ingest.webhook_http import post as http_post
from dashboard.models import AccountSettings, Alert, Run, WebhookDelivery

log = logging.getLogger(__name__)
Status = WebhookDelivery.Status
# Answers worth another try: the receiver is busy or briefly broken.
RETRY_STATUSES = frozenset({408, 429})
POLL_S = 30.0  # a sender looks for due retries (and others' leftovers) this often
BATCH = 20  # deliveries claimed per look
KEEP_DAYS = 14
_wake = threading.Event()
_lock = threading.Lock()
_thread: threading.Thread | None = None
_stopping: threading.Event = threading.Event()  # the running sender's stop
_last_prune = 0.0


def notify_on_commit(run_id: Any, alerts: Iterable[Alert]) -> None:
    """Store a delivery of each of ``alerts`` (rows just stored for ``run_id``, in the
    caller's transaction) when the owner has a webhook; wake the sender on commit."""
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
    name, owner_id, _ = found
    now = timezone.now()
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(user_id=owner_id, body=payload(run_id, name, a), next_at=now)
        for a in alerts
    )
    transaction.on_commit(start)


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


def start() -> None:
    """Start this process's sender (once) and wake it: it sends what is due, this
    process's and any other's."""
    global _thread, _stopping
    with _lock:
        if _thread is None or not _thread.is_alive():
            _stopping = threading.Event()
            _thread = threading.Thread(
                target=_send_forever,
                args=(_stopping,),
                name="alert-webhooks",
                daemon=True,
            )
            _thread.start()
    _wake.set()


def stop(timeout: float = 10.0) -> None:
    """Stop this process's sender, if it runs, once its current look ends (tests:
    a sender left running would reach the database between them)."""
    global _thread
    with _lock:
        thread, _thread = _thread, None
        if thread is None:
            return
        _stopping.set()
    _wake.set()
    thread.join(timeout)


def _send_forever(stopping: threading.Event) -> None:
    from django.db import connection

    while not stopping.is_set():
        _wake.clear()
        wait = POLL_S
        try:
            # Tried some: look again at once (more may be due); else sleep until
            # the earliest retry, or until woken by a new alert.
            wait = 0 if send_due() else _until_next_due()
        except Exception:  # never let one bad look stop the sender
            log.exception("alert webhook: the sender's look for due deliveries")
        finally:
            connection.close()  # this thread's connection, between looks
        if wait > 0 and not stopping.is_set():
            _wake.wait(wait)


def _until_next_due() -> float:
    """Seconds until the earliest retry (at most ``POLL_S``: other processes'
    deliveries and lapsed claims are found by looking)."""
    from django.db.models import Min

    soonest = WebhookDelivery.objects.filter(status=Status.PENDING).aggregate(
        at=Min("next_at")
    )["at"]
    if soonest is None:
        return POLL_S
    return min(POLL_S, max(0.05, (soonest - timezone.now()).total_seconds()))


def send_due(limit: int = BATCH) -> int:
    """Claim and send up to ``limit`` due deliveries; how many were tried."""
    now = timezone.now()
    _prune(now)
    due = list(
        WebhookDelivery.objects.filter(status=Status.PENDING, next_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("next_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    tried = 0
    for pk in due:
        claimed = (
            WebhookDelivery.objects.filter(pk=pk, status=Status.PENDING)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .update(claimed_until=now + _claim_span())
        )
        if not claimed:  # another process may have taken it between the two queries
            continue
        tried += 1
        try:
            _send_one(WebhookDelivery.objects.get(pk=pk))
        except Exception as exc:  # one delivery never stops the others' sending
            log.warning(
                "alert webhook: delivery %s could not be sent (%s)",
                pk, type(exc).__name__, exc_info=True,
            )  # fmt: skip
            _failed_try(pk, exc)
    return tried


def _failed_try(pk: Any, exc: Exception) -> None:
    """A try that raised (a bug, the database) counts as a failed try all the same,
    so the delivery goes on to its next retry or fails, rather than being claimed
    again each time its claim lapses, forever."""
    error = _one_line(f"could not be sent ({type(exc).__name__}: {exc})")
    try:
        d = WebhookDelivery.objects.get(pk=pk)
        _settle(d, {"ok": False, "error": error}, timezone.now())
    except Exception:  # the database itself: the claim lapses, then another try
        log.warning("alert webhook: could not record delivery %s", pk, exc_info=True)


def _claim_span() -> timedelta:
    return timedelta(seconds=settings.ALERT_WEBHOOK_TIMEOUT_S + 30)


def _send_one(d: WebhookDelivery) -> None:
    url = (
        AccountSettings.objects.filter(user_id=d.user_id)
        .values_list("webhook_url", flat=True)
        .first()
    )
    now = timezone.now()
    if not url:  # turned off since the alert: not sent
        result = {"ok": False, "error": "webhook turned off before it was sent"}
        _finish(d, Status.FAILED, result, now, record=False)
        return
    _settle(d, deliver(url, d.body), now)


def _settle(d: WebhookDelivery, result: dict[str, Any], now) -> None:
    """Count the try whose answer is ``result``: delivered, pending until its next
    retry, or failed (a refusal, or every retry spent)."""
    result["at"] = now.isoformat()
    delays = list(settings.ALERT_WEBHOOK_RETRY_S)
    attempts = d.attempts + 1
    if result["ok"]:
        status = Status.DELIVERED
    elif _worth_retrying(result) and attempts <= len(delays):
        status = Status.PENDING
        d.next_at = now + timedelta(seconds=delays[attempts - 1])
        result["retry_at"] = d.next_at.isoformat()
    else:
        status = Status.FAILED
    d.attempts = attempts
    _finish(d, status, result, now, record=True)


def _worth_retrying(result: dict[str, Any]) -> bool:
    if result.get("refused"):  # an address not allowed stays so
        return False
    code = result.get("status")
    return code is None or code >= 500 or code in RETRY_STATUSES


def _finish(
    d: WebhookDelivery, status: str, result: dict[str, Any], now, *, record: bool
) -> None:
    d.status, d.last_result, d.claimed_until = status, result, None
    body = d.body
    # One transaction: whoever sees the delivery done sees the settings say so.
    with transaction.atomic():
        d.save(update_fields=["status", "last_result", "claimed_until", "attempts",
                              "next_at"])  # fmt: skip
        if not record:
            return
        try:
            with transaction.atomic():
                AccountSettings.objects.filter(user_id=d.user_id).update(
                    last_delivery={
                        **result,
                        "at": now.isoformat(),
                        "run": body.get("run", {}).get("id"),
                        "detector": body.get("detector"),
                        "step": body.get("step"),
                        "attempts": d.attempts,
                    }
                )
        except DatabaseError:
            log.warning("alert webhook: could not record the delivery", exc_info=True)


def _prune(now) -> None:
    """Finished deliveries older than ``KEEP_DAYS`` go (at most once an hour)."""
    global _last_prune
    if time.monotonic() - _last_prune < 3600:
        return
    _last_prune = time.monotonic()
    WebhookDelivery.objects.filter(
        status__in=(Status.DELIVERED, Status.FAILED),
        created_at__lt=now - timedelta(days=KEEP_DAYS),
    ).delete()


def deliver(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to ``url``; ``{"ok", "status"}`` or ``{"ok": False, "error"}``
    (``"refused": True`` too when the address is not allowed, which no retry
    changes), the failure logged. Never raises for the receiver's sake: whatever a
    receiver does (refuse, drip, answer garbage) is a failed try, with a reason."""
    timeout = settings.ALERT_WEBHOOK_TIMEOUT_S
    what = f"{_what(body)} at step {body.get('step')}"
    try:
        status = http_post(url, json.dumps(body).encode(), time.monotonic() + timeout)
    except Refused as exc:
        log.warning("alert webhook to %s refused (%s): %s", host_of(url), what, exc)
        return {"ok": False, "error": str(exc), "refused": True}
    except TimeoutError:
        error = f"the receiver was too slow: timed out after {timeout} s"
    except (OSError, ValueError) as exc:  # refused, unreachable, bad certificate, URL
        error = _one_line(str(exc) or type(exc).__name__)
    except http.client.HTTPException as exc:  # an answer that is not HTTP
        error = _one_line(f"not an HTTP answer ({type(exc).__name__}: {exc})")
    except Exception as exc:  # a bug or a case not foreseen: still only this try
        log.warning(
            "alert webhook to %s failed unexpectedly (%s)", host_of(url), what,
            exc_info=True,
        )  # fmt: skip
        error = _one_line(f"{type(exc).__name__}: {exc}")
    else:
        ok = 200 <= status < 300
        if not ok:
            log.warning(
                "alert webhook to %s answered %s (%s)", host_of(url), status, what
            )
        return {"ok": ok, "status": status}
    log.warning("alert webhook to %s failed (%s): %s", host_of(url), what, error)
    return {"ok": False, "error": error}


def _what(body: dict[str, Any]) -> str:
    run = body.get("run")
    run_id = run.get("id") if isinstance(run, dict) else None
    return f"run {run_id}, {body.get('detector', body.get('event'))}"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def send_test(user: Any, url: str) -> dict[str, Any]:
    """POST a test notification to ``url`` now (the settings page's button): the
    answer as :func:`deliver` gives it. Not stored, not retried."""
    base = f"{settings.DASHBOARD_URL}/runs/"
    body = {
        "event": "test",
        "run": {"id": "test", "name": "a test from /settings/", "url": base},
        "step": 0,
        "detector": "test",
        "severity": "info",
        "message": f"a test notification for {user.get_username()}",
        "evidence_url": base,
        "trajectories": [],
    }
    return deliver(url, jsonsafe.clean(body))


def recent(user: Any, n: int = 10) -> list[WebhookDelivery]:
    """The user's last ``n`` deliveries, newest first."""
    return list(
        WebhookDelivery.objects.filter(user=user).order_by("-created_at", "-pk")[:n]
    )


def drain(timeout: float = 10.0) -> bool:
    """Wait until no delivery is due or being sent (tests, shutdown); False when
    ``timeout`` seconds passed first. A delivery waiting for its retry is not due."""
    deadline = time.monotonic() + timeout
    while WebhookDelivery.objects.filter(
        status=Status.PENDING, next_at__lte=timezone.now()
    ).exists():
        if time.monotonic() > deadline:
            return False
        start()
        time.sleep(0.05)
    return True
