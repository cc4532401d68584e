"""A user's own settings (``/settings/``): the webhook their runs' alerts are posted
to. ``check_*`` validates (an error names the field), ``do_*`` saves.

The webhook URL is http or https only, with a host, no user name or password (they
would be stored and shown in clear), no whitespace, at most 500 characters. Delivery
is :mod:`dashboard.ingest.webhooks`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from dashboard import jsonsafe
from dashboard.errors import InvalidConfig
from dashboard.models import AccountSettings

MAX_URL = 500


def check_webhook_url(value: Any) -> str:
    """The URL to save ("" turns notifications off), or InvalidConfig naming
    ``webhook_url``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidConfig("webhook_url: must be a URL")
    url = value.strip()
    if not url:
        return ""
    problem = jsonsafe.text_problem(url)
    if problem:
        raise InvalidConfig(f"webhook_url: {problem}")
    if len(url) > MAX_URL:
        raise InvalidConfig(f"webhook_url: at most {MAX_URL} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidConfig(
            "webhook_url: must not contain spaces or control characters"
        )
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError:
        raise InvalidConfig("webhook_url: not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidConfig(
            "webhook_url: must start with http:// or https:// "
            f"(not {parts.scheme + ':' if parts.scheme else 'a relative URL'})"
        )
    if not parts.hostname:
        raise InvalidConfig("webhook_url: must name a host (https://host/path)")
    if parts.username is not None or parts.password is not None:
        raise InvalidConfig(
            "webhook_url: must not hold a user name or password; put a secret in "
            "the path or query instead"
        )
    del port
    return url


def settings_of(user: Any) -> AccountSettings:
    """The user's settings (unsaved defaults when they never saved any)."""
    found = AccountSettings.objects.filter(user=user).first()
    return found if found is not None else AccountSettings(user=user)


def do_save_settings(user: Any, webhook_url: Any) -> AccountSettings:
    url = check_webhook_url(webhook_url)
    row, _ = AccountSettings.objects.update_or_create(
        user=user, defaults={"webhook_url": url}
    )
    return row
