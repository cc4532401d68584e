"""Personal API tokens: creating, revoking, and authenticating ``Bearer`` requests.

A token is ``arl_`` followed by 43 URL-safe characters (256 random bits); the database
keeps its SHA-256 digest and an 8-character prefix to tell tokens apart in lists. A
request presenting a token acts as the token's user, without a session or CSRF token.
``last_used_at`` is refreshed at most once a minute (one UPDATE, not one per request).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.utils import timezone

from dashboard.models import ApiToken

PREFIX = "arl_"
_TOUCH_EVERY = timedelta(minutes=1)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_token_name(name: Any) -> str:
    from dashboard.errors import InvalidConfig

    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 100:
        raise InvalidConfig("name: must be a string of 1 to 100 characters")
    return name.strip().replace("\x00", "")


def do_create_token(user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token for ``user``: (the row, the token itself, which is never stored)."""
    name = check_token_name(name)
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        user=user, name=name, prefix=token[: len(PREFIX) + 8], digest=_digest(token)
    )
    return row, token


def do_revoke_token(user: Any, token_id: Any) -> bool:
    """Revoke one of ``user``'s tokens; False if there is no such live token."""
    return (
        ApiToken.objects.filter(user=user, pk=token_id, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        == 1
    )


def user_for_token(token: str) -> Any | None:
    """The active user a live token belongs to, or None."""
    if not isinstance(token, str) or not token.startswith(PREFIX) or len(token) > 200:
        return None
    row = (
        ApiToken.objects.select_related("user")
        .filter(digest=_digest(token), revoked_at__isnull=True)
        .first()
    )
    if row is None or not row.user.is_active:
        return None
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row.user


def tokens_of(user: Any) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))
