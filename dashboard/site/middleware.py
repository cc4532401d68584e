"""Login required everywhere, except the JSON API (which answers 401 instead of a
redirect, see ``dashboard.api``) and views marked ``login_not_required``; the API's
405 (django-ninja answers it as plain text) as JSON, like its other errors; and a
query parameter no column can hold (NUL) refused naming it before any view reads
it."""

from __future__ import annotations

import json
from collections.abc import Callable

from django.contrib.auth.middleware import LoginRequiredMiddleware as _Base
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class LoginRequiredMiddleware(_Base):
    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class ApiMethodNotAllowedMiddleware:
    """A 405 under ``/api/`` becomes ``{"detail", "errors"}`` JSON, ``Allow`` kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405 or not request.path_info.startswith("/api/"):
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        allowed = response.get("Allow", "")
        body = {
            "detail": "method not allowed",
            "errors": [
                f"method: {request.method} is not allowed here (allowed: "
                f"{allowed or 'none'})"
            ],
        }
        out = HttpResponse(
            json.dumps(body), status=405, content_type="application/json"
        )
        if allowed:
            out["Allow"] = allowed
        return out


class QueryTextMiddleware:
    """A query parameter (name or value) holding NUL is a 400 naming it: no stored
    text can hold one (PostgreSQL refuses it mid-query, which was a 500 wherever a
    view filtered by the parameter), so no view needs to guard each of its own. JSON
    under ``/api/``, trackio's ``{"data": null, "error"}`` (answered 200, which its
    client reads) under ``/trackio/``, the site's styled 400 page elsewhere (its
    Content-Security-Policy from ``CSPMiddleware``, which runs outside this one)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        bad = [
            name
            for name, values in request.GET.lists()
            if "\x00" in name or any("\x00" in v for v in values)
        ]
        if not bad:
            return self.get_response(request)
        errors = [
            f"{name.replace(chr(0), '?')}: must not contain NUL characters"
            for name in bad
        ]
        if request.path_info.startswith("/trackio/"):  # its client reads a 2xx body
            body = {"data": None, "error": "; ".join(errors)}
            return HttpResponse(json.dumps(body), content_type="application/json")
        if request.path_info.startswith("/api/"):
            body = {"detail": errors[0], "errors": errors}
            return HttpResponse(
                json.dumps(body), status=400, content_type="application/json"
            )
        # The site's own 400 page, as a view's bad query renders it (the runs
        # list's ?status=nope): the layout, the parameter named, escaped.
        return render(request, "400.html", {"errors": errors}, status=400)
