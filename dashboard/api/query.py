"""An unknown query parameter on the JSON API is a 400 naming it (issue 22.12): a
misspelt ``?since=`` or ``?limit=`` must not be silently ignored and answer as if it
were not there. The parameters an endpoint takes are those its OpenAPI operation
declares, read once from the schema django-ninja builds.

A ``HEAD`` is answered as its ``GET``, without the body (RFC 9110 9.3.2, and what
Django's own views do): django-ninja routes by method and has no HEAD, so each ``GET``
endpoint answered 405. Done here, the one request-level gate of ``/api/``, rather than
by adding HEAD to every operation, which would put HEAD twins in the OpenAPI schema."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve


@cache
def declared() -> dict[tuple[str, str], frozenset[str]]:
    """(route as the resolver spells it, method) -> the query parameters declared."""
    from dashboard.api import api

    out: dict[tuple[str, str], frozenset[str]] = {}
    for path, item in api.get_openapi_schema()["paths"].items():
        route = re.sub(r"\{(\w+)\}", r"<\1>", path).lstrip("/")
        for method, op in item.items():
            names = {
                p["name"] for p in op.get("parameters", []) if p.get("in") == "query"
            }
            out[(route, method.upper())] = frozenset(names)
    return out


def unknown_parameters(request: HttpRequest) -> list[str]:
    """``name: ...`` for each query parameter the endpoint does not take (none for a
    path that is not an API operation: the docs, a 404, a 405)."""
    if not request.GET:
        return []
    try:
        route = resolve(request.path_info).route
    except Resolver404:
        return []
    method = "GET" if request.method == "HEAD" else request.method
    allowed = declared().get((route, method))
    if allowed is None:
        return []
    takes = ", ".join(sorted(allowed)) or "none"
    return [
        f"{name}: unknown query parameter (this endpoint takes: {takes})"
        for name in sorted(set(request.GET) - allowed)
    ]


def head_as_get(
    request: HttpRequest, get_response: Callable[[HttpRequest], HttpResponse]
) -> HttpResponse:
    """The ``GET`` answer to a ``HEAD``: its status and headers (``Content-Length``
    the body's), no body. A streamed body is left to the server, which drops a
    HEAD's (Daphne's Twisted does)."""
    request.method = "GET"
    try:
        response = get_response(request)
    finally:
        request.method = "HEAD"
    if not response.streaming:
        response["Content-Length"] = str(len(response.content))
        response.content = b""
    return response


class UnknownQueryParameterMiddleware:
    """Answers ``/api/`` requests with an unknown query parameter 400, as JSON; a
    ``HEAD`` as its ``GET`` (:func:`head_as_get`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith("/api/"):
            return self.get_response(request)
        errors = unknown_parameters(request)
        if errors:
            body = {"detail": errors[0], "errors": errors}
            return HttpResponse(
                json.dumps(body), status=400, content_type="application/json"
            )
        if request.method == "HEAD":
            return head_as_get(request, self.get_response)
        return self.get_response(request)
