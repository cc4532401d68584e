"""trackio's self-hosted HTTP API (version 1), mounted at ``/trackio/``: what its own
client sends (``docs/trackio.md``), so ``TRACKIO_SERVER_URL=http://HOST/trackio/
?write_token=arl_...`` streams a TRL or verl run here unchanged.

* ``GET /trackio/version``: ``{"api_version": 1, ...}`` (public, as trackio's).
* ``POST /trackio/api/<name>`` with ``{"args": [...], "kwargs": {...}}``: the answer is
  ``{"data": ..., "error": null}``. The write token is one of our API tokens, in the
  ``x-trackio-write-token`` header, else the ``?write_token=`` of the URL, else
  ``Authorization: Bearer``.

Errors are ``{"data": null, "error": "field: message"}`` answered 200, because
trackio's client reads the body of a 2xx answer only (``raise_for_status()`` first) and
prints that error; an unknown call is a 404, as trackio's server answers it. While
``INGEST_MAX_CONCURRENT`` bodies are in hand already (:mod:`dashboard.ingest.
admission`), a 503 with ``Retry-After``: trackio's client counts a 5xx as transient,
keeps the batch in its local buffer and sends it again, with the same log ids. The
reads (``init``'s) take no slot: their bodies are small, and bounded to
``READ_MAX_BODY_BYTES``. An alert batch that small takes a slot of a pool of its own
(trackio's client never sends a refused alert batch again), so it does not wait
behind the big bodies. An adapter:
it parses and binds the arguments, the calls live in :mod:`dashboard.runs.trackio`.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.http.request import RawPostDataException
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from dashboard import jsonsafe
from dashboard.errors import ServiceError
from dashboard.ingest import admission
from dashboard.runs import event_body, trackio
from dashboard.site import tokens

API_VERSION = 1
TOKEN_HEADER = "X-Trackio-Write-Token"
log = logging.getLogger(__name__)


def _answer(data: Any = None, error: str | None = None, status: int = 200):
    body = {"data": jsonsafe.clean(data, keep_objects=True), "error": error}
    return HttpResponse(
        json.dumps(body, allow_nan=False, default=str),
        status=status,
        content_type="application/json",
    )


def _token(request: HttpRequest) -> str | None:
    token = request.headers.get(TOKEN_HEADER) or request.GET.get("write_token")
    if token:
        return token
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


# The calls: trackio's parameter names (``hf_token`` accepted and unused: our token
# is the write token), each bound to the caller.
def _bulk_log(user, logs, hf_token=None):
    return trackio.do_bulk_log(user, logs)


def _bulk_log_system(user, logs, hf_token=None):
    return trackio.do_bulk_log_system(user, logs)


def _bulk_alert(user, alerts, hf_token=None):
    return trackio.do_bulk_alert(user, alerts)


def _log(user, project, run, metrics, step=None, hf_token=None, run_id=None):
    entry = {"project": project, "run": run, "run_id": run_id}
    return trackio.do_log(user, {**entry, "metrics": metrics, "step": step})


def _runs(user, project):
    return trackio.runs_of_project(user, project)


def _summary(user, project, run=None, run_id=None):
    return trackio.run_summary(user, project, run=run, run_id=run_id)


def _projects(user):
    return trackio.projects_of(user)


# The calls that store what they carry: their bodies (up to TRACKIO_MAX_BODY_BYTES) are
# parsed and stored in an ingest slot; the others' bodies are a few names.
WRITES = frozenset({"bulk_log", "bulk_log_system", "bulk_alert", "log"})
READ_MAX_BODY_BYTES = 64 << 10
CALLS: dict[str, Callable[..., Any]] = {
    "bulk_log": _bulk_log,
    "bulk_log_system": _bulk_log_system,
    "bulk_alert": _bulk_alert,
    "log": _log,
    "get_runs_for_project": _runs,
    "get_run_summary": _summary,
    "get_all_projects": _projects,
}


def bind(fn: Callable[..., Any], args: Any, kwargs: Any) -> dict[str, Any]:
    """trackio's binding: positional ``args`` fill the parameters in order, then
    ``kwargs`` by name (unknown names ignored, as trackio's server does); a missing
    required parameter is refused by name."""
    if not isinstance(args, list):
        raise ServiceError("args: must be a list")
    if not isinstance(kwargs, dict):
        raise ServiceError("kwargs: must be an object")
    params = list(inspect.signature(fn).parameters.values())[1:]  # after the user
    bound = dict(zip((p.name for p in params), args, strict=False))
    for p in params:
        if p.name in kwargs:
            bound[p.name] = kwargs[p.name]
        elif p.name not in bound and p.default is inspect.Parameter.empty:
            raise ServiceError(f"kwargs.{p.name}: required")
    return bound


def _small_alerts(request: HttpRequest, name: str) -> bool:
    """An alert batch of at most ``READ_MAX_BODY_BYTES`` (its declared length; what
    is read is held to it too): it takes a slot of its own pool, not one the big
    bodies hold. trackio's client keeps a refused log batch and sends it again, but
    an alert batch it fails to send is gone (``_flush_local_buffer`` re-sends logs
    and system logs only), so it must not wait behind them for a 503."""
    if name != "bulk_alert":
        return False
    try:
        return (
            0 <= int(request.headers.get("Content-Length", "")) <= READ_MAX_BODY_BYTES
        )
    except ValueError:
        return False


def _body(request: HttpRequest, limit: int) -> tuple[list[Any], dict[str, Any]]:
    try:
        raw = request.read(limit + 1)
    except RawPostDataException:  # something already read it
        raw = request.body
    if len(raw) > limit:
        raise ServiceError(f"body: more than {limit} bytes; send smaller batches")
    event_body.check_values(raw)  # before parsing: what the body unfolds into
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError) as exc:
        raise ServiceError(f"body: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ServiceError('body: must be an object {"args": [...], "kwargs": {...}}')
    return body.get("args") or [], body.get("kwargs") or {}


@csrf_exempt
@login_not_required
def version(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":
        return _answer(error=f"method: {request.method} is not allowed", status=405)
    return HttpResponse(
        json.dumps(
            {
                "version": "agentic-rl",
                "api_version": API_VERSION,
                "writes_paused": False,
                "api_transport": "http",
                "mcp_enabled": False,
                "mcp_path": None,
            }
        ),
        content_type="application/json",
    )


@csrf_exempt
@login_not_required
def call(request: HttpRequest, name: str) -> HttpResponse:
    """One trackio call: bind, authenticate, run; errors as ``{"error": ...}``."""
    fn = CALLS.get(name)
    if fn is None:
        return _answer(error=f"Unknown API: {name}", status=404)
    if request.method != "POST":
        return _answer(error=f"method: {request.method} is not allowed", status=405)
    user = tokens.user_for_token(_token(request) or "")
    if user is None:
        return _answer(
            error="write_token: not a live API token of this dashboard (create one at "
            "/settings/tokens/ and put it in the server URL: ?write_token=arl_...)"
        )
    try:
        if name not in WRITES:
            args, kwargs = _body(request, READ_MAX_BODY_BYTES)
            return _answer(fn(user, **bind(fn, args, kwargs)))
        if _small_alerts(request, name):  # their own slots: never behind big bodies
            with admission.slot(pool="small"):
                args, kwargs = _body(request, READ_MAX_BODY_BYTES)
                return _answer(fn(user, **bind(fn, args, kwargs)))
        with admission.slot():
            args, kwargs = _body(request, settings.TRACKIO_MAX_BODY_BYTES)
            return _answer(fn(user, **bind(fn, args, kwargs)))
    except admission.Busy as exc:  # the client keeps the batch and sends it again
        response = _answer(error="; ".join(exc.errors), status=503)
        response["Retry-After"] = str(exc.retry_after)
        return response
    except ServiceError as exc:
        return _answer(error="; ".join(exc.errors))
    except Exception:  # the traceback to the log, the client a message without paths
        log.exception("trackio call %s failed", name)
        return _answer(
            error="internal error; the server log has the details", status=500
        )


urlpatterns = [
    path("version", version, name="trackio-version"),
    path("api/<str:name>", call, name="trackio-call"),
]
