from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    label = "dashboard"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Web, worker and management commands all start here: load the plugins once
        # (settings.PLUGINS and the agentic_rl.plugins entry points). A plugin that
        # fails to import stops the start with an error naming it.
        from django.conf import settings

        from trainer.plugins import load_plugins

        load_plugins(settings.PLUGINS)
