"""Login required everywhere, except the JSON API (which answers 401 instead of a
redirect, see ``dashboard.api``) and views marked ``login_not_required``; and the
API's 405 (django-ninja answers it as plain text) as JSON, like its other errors."""

from __future__ import annotations

import json
from collections.abc import Callable

from django.contrib.auth.middleware import LoginRequiredMiddleware as _Base
from django.http import HttpRequest, HttpResponse


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
