"""The run platform: Django + Channels + Celery around the pure ``trainer``/``rewards``."""

from dashboard.celery import app as celery_app

__all__ = ["celery_app"]
