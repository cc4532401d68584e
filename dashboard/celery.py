"""The Celery app. Settings come from Django (``CELERY_*``); tasks from ``dashboard.tasks``.

Start a worker per device: ``celery -A dashboard worker -Q gpu -c 1 --prefetch-multiplier 1``
(``-Q cpu`` on CPU-only hosts). Nothing here imports torch: CUDA must be initialised
only in the prefork child that runs the task, never in the parent that forks it.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dashboard"])
