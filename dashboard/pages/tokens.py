"""``/settings/tokens/``: a user's API tokens (create, shown once; list; revoke).

Adapters over :mod:`dashboard.site.tokens`: the new token is rendered in the response to
the POST that created it and nowhere else (never stored, never in a redirect URL).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from dashboard.pages.csp import csp
from dashboard.runs.services import ServiceError
from dashboard.site import tokens


@csp
def token_list(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"new_token": None, "error": "", "name": ""}
    if request.method == "POST":
        name = request.POST.get("name", "")
        try:
            row, token = tokens.do_create_token(request.user, name)
        except ServiceError as exc:
            context.update(error="; ".join(exc.errors), name=name)
        else:
            context["new_token"] = {"name": row.name, "token": token}
    context["tokens"] = tokens.tokens_of(request.user)
    context["api_url"] = request.build_absolute_uri("/")
    response = render(request, "pages/tokens.html", context)
    if context["new_token"]:
        response["Cache-Control"] = "no-store"
    return response


@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    if tokens.do_revoke_token(request.user, token_id):
        messages.info(request, "Token revoked: requests using it now get 401.")
    else:
        messages.error(request, "No such active token.")
    return redirect("pages:tokens")
