"""Typed readers for environment variables, used only by ``dashboard/settings.py``.

Each helper rejects a malformed value with :class:`ImproperlyConfigured` naming the
variable (healthchecks-style), so a typo in a deployment fails at start-up instead of
silently falling back to a default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(
    name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """The variable's value, or ``default`` when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(name, "")
    return value if value != "" else default


def env_bool(
    name: str, default: bool, *, environ: Mapping[str, str] | None = None
) -> bool:
    raw = env_str(name, environ=environ)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)"
    )


def env_int(
    name: str,
    default: int,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    raw = env_str(name, environ=environ)
    if raw is None:
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if min_value is not None and value < min_value:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {min_value}")
    if max_value is not None and value > max_value:
        raise ImproperlyConfigured(f"{name}={value} is above the maximum {max_value}")
    return value


def env_list(
    name: str, default: list[str], *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """A comma-separated list; blank items are dropped."""
    raw = env_str(name, environ=environ)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_database_url(url: str) -> dict[str, Any]:
    """``postgres://user:pass@host:port/name?sslmode=require`` or ``sqlite:///path``
    into a Django ``DATABASES`` entry (psycopg 3 for Postgres)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        # sqlite:////abs/path.db -> /abs/path.db; sqlite:///rel.db -> rel.db
        path = unquote(parts.path)[1:]
        if parts.netloc or not path:
            raise ImproperlyConfigured(
                f"DATABASE_URL {url!r}: use sqlite:////absolute/path.db"
            )
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path}
    if scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL scheme {parts.scheme!r} is not supported (postgres:// or sqlite://)"
        )
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured(f"DATABASE_URL {_redact(url)!r} names no database")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(
            f"DATABASE_URL {_redact(url)!r} has a bad port"
        ) from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),
        "PORT": str(port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
    }


def check_redis_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"REDIS_URL scheme {parts.scheme!r} is not redis:// or rediss://"
        )
    return url


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
