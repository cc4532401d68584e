"""``/settings/``: the user's own settings: the webhook their alerts are posted to.

Adapters over :mod:`dashboard.site.account`; a refused URL re-renders the form with
the error under its field (400), a saved one redirects (POST/redirect/GET).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime

from dashboard.errors import ServiceError
from dashboard.pages.csp import csp
from dashboard.site import account


@csp
def account_settings(request: HttpRequest) -> HttpResponse:
    row = account.settings_of(request.user)
    context = {
        "settings_row": row,
        "webhook_url": row.webhook_url,
        "error": "",
        "timeout": settings.ALERT_WEBHOOK_TIMEOUT_S,
        "dashboard_url": settings.DASHBOARD_URL,
        "delivered_at": parse_datetime(str(row.last_delivery.get("at") or "")),
    }
    if request.method == "POST":
        url = request.POST.get("webhook_url", "")
        try:
            saved = account.do_save_settings(request.user, url)
        except ServiceError as exc:
            context.update(error="; ".join(exc.errors), webhook_url=url)
            return render(request, "pages/account.html", context, status=400)
        messages.info(
            request,
            "Webhook saved: every new alert of your runs is posted there."
            if saved.webhook_url
            else "Webhook removed: alerts are no longer posted anywhere.",
        )
        return redirect("pages:account")
    return render(request, "pages/account.html", context)
