"""Content-Security-Policy for the pages: scripts and styles from our origin only.

No inline ``<script>``, no inline event handlers, no ``style`` attributes: the pages
load ES modules from ``/static/js/`` and stylesheets from ``/static/css/``; data for
scripts travels in ``<script type="application/json">`` blocks (never executed) or
through the JSON API. Model-generated text can therefore not run even if an escaping
bug let markup through.

Every page view is wrapped with :func:`csp`; :class:`CSPMiddleware` puts the same
header on the rest of the site (the login page...), skipping the admin and the API
docs, whose bundled templates use inline code.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
SKIP_PREFIXES = ("/admin/", "/api/docs")


def policy(request: HttpRequest) -> str:
    host = request.get_host()
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self'",
            "font-src 'self'",
            # 'self' covers same-origin websockets in CSP3; the explicit ws(s) sources
            # are for browsers that still need them.
            f"connect-src 'self' ws://{host} wss://{host}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def apply(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if HEADER not in response:
        response[HEADER] = policy(request)
    return response


def csp(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return apply(request, view(request, *args, **kwargs))

    return wrapped


class CSPMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path_info.startswith(SKIP_PREFIXES):
            return response
        content_type = response.get("Content-Type", "")
        if content_type.startswith("text/html"):
            apply(request, response)
        return response
