"""``/settings/tokens/``: a user's API tokens (create, shown once; list; revoke).

Adapters over :mod:`dashboard.site.tokens`: the new token is rendered in the response to
the POST that created it and nowhere else (never stored, never in a redirect URL); a
reload of that response, which resends the form, creates no second token.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from dashboard.pages.csp import csp
from dashboard.runs.services import ServiceError
from dashboard.site import tokens

# The session's one-use mark of the create form last rendered: a POST that does not
# carry it (a reload of the page that showed a new token resends its form; an old
# tab's form) creates nothing. The token itself is never kept.
FORM_KEY = "token_form"
RESENT = (
    "name: this form was already sent (a reload of the page that showed the new "
    "token sends it again) or is out of date: nothing was created. The token it "
    "created is listed below; create another here if you need one."
)


@csp
def token_list(request: HttpRequest) -> HttpResponse:
    context: dict[str, Any] = {"new_token": None, "error": "", "name": ""}
    if request.method == "POST":
        name = request.POST.get("name", "")
        mark = request.session.pop(FORM_KEY, None)
        if not mark or request.POST.get("form_mark") != mark:
            context.update(error=RESENT, name=name)
        else:
            try:
                row, token = tokens.do_create_token(request.user, name)
            except ServiceError as exc:
                context.update(error="; ".join(exc.errors), name=name)
            else:
                context["new_token"] = {"name": row.name, "token": token}
    context["form_mark"] = request.session[FORM_KEY] = secrets.token_urlsafe(16)
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
