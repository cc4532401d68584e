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
        from django.db.backends.signals import connection_created

        connection_created.connect(sqlite_functions, dispatch_uid="sqlite_functions")


def _lower(text: object) -> object:
    return text.lower() if isinstance(text, str) else text


def sqlite_functions(sender: object, connection: object, **kwargs: object) -> None:
    """SQLite's own ``lower()`` (and ``LIKE``) fold ASCII letters only: "DONNÉES"
    found no run named "données". ``py_lower`` folds as Python (and PostgreSQL's
    ``lower()``) do; :class:`dashboard.reads.runs.Lower` calls it on SQLite."""
    if getattr(connection, "vendor", "") == "sqlite":
        connection.connection.create_function("py_lower", 1, _lower, deterministic=True)
