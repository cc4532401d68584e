"""The JSON API (django-ninja) at ``/api/``; OpenAPI at ``/api/openapi.json``, docs at
``/api/docs`` (both for a signed-in user or a token client; an anonymous browser is
sent to the login page, an anonymous script gets a 401; assets served locally).

Authentication: a personal API token (``Authorization: Bearer <token>``, no CSRF; see
``/settings/tokens/`` or ``manage.py create_token``), or the browser session with CSRF
on unsafe methods (``X-CSRFToken`` header). Anonymous callers and revoked or unknown
tokens get 401, other users' runs 404, staff see every run. Every error is JSON (a 405
too: ``site.middleware``). Bad input is a 400 whose ``errors`` are ``field: message``
lines; nothing is enqueued then. No input is a 500: numbers no float or column holds
are refused by the shared checks (``services.check_shape``, ``trainer.event_schema``,
``schemas.MAX_INT``); text no column stores (NUL, lone surrogates) is refused where
it names something a caller chose (``services.check_text``: a run's name, a group)
and repaired where it is content sent to be kept (events' text, facts, metric keys:
NUL becomes U+FFFD, a lone surrogate ``?``, ``dashboard.jsonsafe``). Numbers that are
not finite are written as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
Views are adapters: parse, call ``services``/``dashboard.reads``, return.

May import: ``reads``, ``runs``, ``ingest``, ``live``, ``library``, ``site`` and the
root modules; never ``pages``.
"""

from __future__ import annotations

import json
import logging
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder
from ninja.security import HttpBearer, SessionAuth

from dashboard import jsonsafe
from dashboard.runs import services
from dashboard.site import tokens


class SafeJSONRenderer(JSONRenderer):
    """Never emits bare NaN/Infinity (invalid JSON): they become strings."""

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> str:
        safe = jsonsafe.clean(data, keep_objects=True)
        return json.dumps(safe, cls=NinjaJSONEncoder, allow_nan=False)


log = logging.getLogger(__name__)


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>``: the request acts as the token's user."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = tokens.user_for_token(token)
        if user is not None:
            request.user = user
        return user


class BrowserSession(SessionAuth):
    """The browser session, CSRF checked for a signed-in user only: an anonymous
    caller is a 401 (not signed in), not a CSRF 403."""

    def __call__(self, request: HttpRequest) -> Any:
        if not getattr(request.user, "is_authenticated", False):
            return None
        return super().__call__(request)


def _docs_auth(view: Any) -> Any:
    """The schema and the docs for a session or a Bearer token (a curl user reads the
    OpenAPI document with the token they call the API with); anonymous: the login
    page for the HTML docs, a JSON 401 for the schema."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = getattr(request, "user", None)
        if not getattr(user, "is_authenticated", False):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            found = tokens.user_for_token(token.strip()) if scheme == "Bearer" else None
            if found is not None:
                request.user = found
            elif request.path.endswith(".json") or header:
                body = {"detail": "authentication required", "errors": [
                    "Authorization: a Bearer API token or a signed-in session"
                ]}  # fmt: skip
                return HttpResponse(
                    json.dumps(body), status=401, content_type="application/json"
                )
            else:
                return login_required(view)(request, *args, **kwargs)
        return view(request, *args, **kwargs)

    return wrapped


api = NinjaAPI(
    title="Agentic RL dashboard API",
    version="1",
    description=(
        "Runs, their metrics, trajectories, alerts and models; launching, cloning and "
        "cancelling runs; external runs' events (NDJSON, gzip welcome).\n\n"
        "**Authentication**: a personal API token (`Authorization: Bearer <token>`, "
        "from [/settings/tokens/](/settings/tokens/)), or this browser's session "
        "(`X-CSRFToken` on writes). Others' runs are 404s.\n\n"
        "**Errors** are JSON: a 400's `errors` are `field: message` lines, and nothing "
        'was stored. Numbers that are not finite are the strings `"NaN"`, '
        '`"Infinity"`, `"-Infinity"`.\n\n'
        "[Back to the dashboard](/) · the event format: "
        "[/api/events/schema.json](/api/events/schema.json)"
    ),
    auth=[BearerToken(), BrowserSession()],
    urls_namespace="api",
    docs_decorator=_docs_auth,
    renderer=SafeJSONRenderer(),
)


@api.exception_handler(NinjaValidationError)
def _validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    errors = []
    for err in exc.errors:
        loc = [
            str(p)
            for p in err.get("loc", ())
            if p not in ("body", "payload", "query", "path")
        ]
        errors.append(f"{'.'.join(loc) or '(request)'}: {err.get('msg', 'invalid')}")
    return api.create_response(
        request, {"detail": "invalid request", "errors": errors}, status=400
    )


@api.exception_handler(services.ServiceError)
def _service_error(request: HttpRequest, exc: services.ServiceError) -> HttpResponse:
    response = api.create_response(
        request, {"detail": str(exc.errors[0]), "errors": exc.errors}, status=exc.status
    )
    for name, value in getattr(exc, "headers", {}).items():  # a 503's Retry-After
        response[name] = value
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    """ninja's own errors as ninja answers them, but a body it cannot parse named as
    the field it is, with the parser's reason (not "Cannot parse request body")."""
    message = str(exc)
    if exc.status_code == 400 and message.startswith("Cannot parse request body"):
        cause = exc.__cause__
        why = (str(cause).splitlines() or [""])[0][:200] if cause is not None else ""
        message = f"body: not a JSON object this API reads ({why or 'unreadable'})"
        body = {"detail": message, "errors": [message]}
    else:
        body = {"detail": message}
    return api.create_response(request, body, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return api.create_response(
        request, {"detail": "request body too large", "errors": [str(exc)]}, status=413
    )


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The traceback goes to the log; the caller gets JSON without server paths.
    log.exception("API error on %s %s", request.method, request.path)
    return api.create_response(
        request,
        {"detail": "internal error; the server log has the details"},
        status=500,
    )


# The endpoints, by concept: external runs (create, events, finish, the event schema),
# runs (launch, list, clone, cancel, the config schema), what a run produced. External
# first: Django matches paths in order, and /runs/external must not be read as
# /runs/{run_id}.
from dashboard.api import data, external_runs, repair, runs  # noqa: E402

api.add_router("", external_runs.router)
api.add_router("", runs.router)
api.add_router("", data.router)
api.add_router("", repair.router)
