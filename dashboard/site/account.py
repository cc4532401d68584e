"""A user's own settings (``/settings/``): the webhook their runs' alerts are posted
to. ``check_*`` validates (an error names the field), ``do_*`` saves.

The webhook URL is http or https only, with a host, no user name or password (they
would be stored and shown in clear), no whitespace, at most 500 characters.

Webhooks go to public addresses only (:func:`refusal`, unless the server sets
``ALERT_WEBHOOK_ALLOW_PRIVATE``): were loopback, private or link-local addresses
allowed, "Send a test" would let any user probe the server's own network. A host
written as an IP (or ``localhost``) is refused here already; a name is checked by
:mod:`dashboard.ingest.webhooks` on each delivery, against the address it resolves
to then and connects to (a lookup here would prove nothing about later).
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

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
    host = parts.hostname.rstrip(".")
    if len(host) > 253 or any(len(label) > 63 for label in host.split(".")):
        raise InvalidConfig(
            "webhook_url: the host name is longer than a DNS name can be "
            "(253 characters in all, 63 between dots)"
        )
    refused = _literal_refusal(parts.hostname)
    if refused:
        raise InvalidConfig(refused)
    return url


def _literal_refusal(host: str) -> str | None:
    """The refusal of a host that is an IP address or ``localhost`` (RFC 6761: always
    loopback) and not allowed; None for a name, looked up only when sending."""
    if host == "localhost" or host.endswith(".localhost"):
        return refusal(host, "127.0.0.1")
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        return None
    return refusal(address, address)


def address_problem(address: str) -> str | None:
    """What ``address`` (an IP) is when a webhook must not go there, as in "a
    loopback address": loopback, private, link-local (a cloud's metadata service),
    multicast, reserved, unspecified or otherwise not global; None for a public
    address. An IPv6 address carrying an IPv4 one (``::ffff:a.b.c.d``, NAT64
    ``64:ff9b::a.b.c.d``) is judged as the IPv4 one, and 6to4 (``2002:a.b.c.d::``)
    must pass as both."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # less a scope "%eth0"
    except ValueError:
        return "not an IP address"
    candidates = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            candidates = [ip.ipv4_mapped]
        elif ip in _NAT64:
            candidates = [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
        elif ip.sixtofour is not None:
            candidates.append(ip.sixtofour)
    for each in candidates:
        for kind in _KINDS:
            if getattr(each, f"is_{kind}"):
                article = "an" if kind[0] in "aeiou" else "a"
                return f"{article} {kind.replace('_', '-')} address"
        if not each.is_global:  # e.g. 100.64.0.0/10, a carrier's shared space
            return "not a public address"
    return None


# Checked in this order: 127.0.0.1 is private as well as loopback, say loopback.
_KINDS = ("unspecified", "loopback", "link_local", "multicast", "private", "reserved")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def refusal(host: str, address: str) -> str | None:
    """Why a webhook to ``host`` must not go to ``address`` (what it resolved to),
    naming the field and the setting that allows it; None when it may."""
    if settings.ALERT_WEBHOOK_ALLOW_PRIVATE:
        return None
    problem = address_problem(address)
    if problem is None:
        return None
    where = f"{host} is" if host == address else f"{host} resolves to {address},"
    return (
        f"webhook_url: {where} {problem}; webhooks go to public addresses only "
        "(ALERT_WEBHOOK_ALLOW_PRIVATE=1 on the server allows its own network)"
    )


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
