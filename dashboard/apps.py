from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    label = "dashboard"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"
