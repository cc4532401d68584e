"""Platform views outside the pages and the API: the health check, and the 404 that
answers JSON under ``/api/`` (every API error is JSON) and a page elsewhere."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


@login_not_required
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


@login_not_required
def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path_info.startswith("/api/"):
        return JsonResponse({"detail": "Not Found"}, status=404)
    return defaults.page_not_found(request, exception)
