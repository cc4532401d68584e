"""``manage.py bootstrap_demo``: the embedded default's first-run setup.

Creates the ``demo`` user (password generated once, kept in ``var/demo_password`` and
printed every time) and launches the demo runs that user has not run yet (by name):
the calc learning demo (tens of minutes on 2 cores), then a long swarm demo, so that a
newcomer who logs in later still finds a run training live. Runs execute one at a
time in the embedded mode: the swarm demo starts when the calc demo ends. Both are
marked ``demo``: a run the user launches goes before them, and a demo in progress
pauses for it (``dashboard.runs.inprocess``). Refuses to run outside the embedded
mode unless ``--force``. The demos' configs are in :mod:`dashboard.runs.demos`.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from dashboard.models import Run
from dashboard.runs import services
from dashboard.runs.demos import DEMOS


class Command(BaseCommand):
    help = "Create the demo user and launch a tiny demo run (embedded mode)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--force", action="store_true", help="Allow outside the embedded mode."
        )
        parser.add_argument("--username", default="demo")

    def handle(self, *args, force: bool, username: str, **options):
        if not settings.EMBEDDED and not force:
            raise CommandError(
                "bootstrap_demo is for the embedded default (no DATABASE_URL/REDIS_URL)"
            )
        password = self._password()
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User.objects.create_user(username, password=password)
        elif not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        runs = []
        for config in DEMOS:
            run = (
                Run.objects.filter(owner=user, name=config["name"])
                .order_by("created_at")
                .first()
            )
            runs.append(run or services.launch_run(user, config, demo=True))
        self.stdout.write(f"demo login: username={username} password={password}")
        for run in runs:
            self.stdout.write(
                f"demo run: {run.id} ({run.status}) {run.name!r} at /runs/{run.id}/"
            )

    def _password(self) -> str:
        path = settings.VAR_DIR / "demo_password"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(12))
            path.chmod(0o600)
        return path.read_text().strip()
