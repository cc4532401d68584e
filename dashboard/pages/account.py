"""``/settings/``: the user's own settings: the webhook their alerts are posted to.

Adapters over :mod:`dashboard.site.account`; a refused URL re-renders the form with
the error under its field (400), a saved one redirects (POST/redirect/GET). "Send a
test" (``action=test``) POSTs a test notification to the URL in the field, saved or
not, and says what the receiver answered; the page lists the last deliveries.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime

from dashboard.errors import ServiceError
from dashboard.ingest import webhooks
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
        "deliveries": webhooks.recent(request.user),
        "retry_delays": ", ".join(_duration(s) for s in settings.ALERT_WEBHOOK_RETRY_S),
    }
    if request.method == "POST" and request.POST.get("action") == "test":
        url = request.POST.get("webhook_url", "")
        try:
            checked = account.check_webhook_url(url)
        except ServiceError as exc:
            context.update(error="; ".join(exc.errors), webhook_url=url)
            return render(request, "pages/account.html", context, status=400)
        if not checked:
            context.update(error="webhook_url: enter a URL to send a test to")
            return render(request, "pages/account.html", context, status=400)
        result = webhooks.send_test(request.user, checked)
        context.update(webhook_url=checked, test_result=result)
        return render(request, "pages/account.html", context)
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


def _duration(seconds: float) -> str:
    """10 -> "10 s", 300 -> "5 min", 7200 -> "2 h"."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
