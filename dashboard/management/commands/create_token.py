"""``manage.py create_token USERNAME [--name N]``: print a new API token for a user.

The token is printed once and stored only as a digest; use it as
``Authorization: Bearer <token>`` (or ``DASHBOARD_TOKEN`` for ``python -m trainer``).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from dashboard.runs.services import ServiceError
from dashboard.site import tokens


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (shown only this once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="A label for the token.")

    def handle(self, *args, username: str, name: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        try:
            _, token = tokens.do_create_token(user, name)
        except ServiceError as exc:
            raise CommandError("; ".join(exc.errors)) from None
        self.stdout.write(token)
