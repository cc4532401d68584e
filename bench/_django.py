"""Shared set-up for the platform benchmarks: Django on the configured database,
migrated, and a throwaway user whose runs (and every row under them) are deleted at
exit. The benchmarks need PostgreSQL (DATABASE_URL); they print, never assert."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")


def setup(require_postgres: bool = True):
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    if require_postgres and connection.vendor != "postgresql":
        sys.exit(
            "set DATABASE_URL=postgres://... (and SECRET_KEY): the benchmark measures PostgreSQL"
        )
    call_command("migrate", interactive=False, verbosity=0)
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(
        f"bench-{os.getpid()}", password="bench-password-1"
    )
    atexit.register(lambda: get_user_model().objects.filter(pk=user.pk).delete())
    return user


def new_run(user, steps: int = 5):
    from dashboard.models import Run

    config = {"name": "bench", "steps": steps}
    return Run.objects.create(
        owner=user, name="bench", config=config, status="running", queue="cpu"
    )


def percentile(values, q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]
