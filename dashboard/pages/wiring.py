"""The three settings the pages need, applied to a settings object when missing.

``dashboard.settings`` should carry them itself (``"dashboard.pages"`` in
``INSTALLED_APPS``, :class:`dashboard.pages.csp.CSPMiddleware` in ``MIDDLEWARE``, and
``dashboard.urls`` including ``dashboard.pages.urls``); until it does, tests, the
browser tests' server and the benchmark call :func:`wire` so they run the real pages.
"""

from __future__ import annotations

from typing import Any

APP = "dashboard.pages"
MIDDLEWARE = "dashboard.pages.csp.CSPMiddleware"
URLCONF = "dashboard.pages.site_urls"


def urls_included() -> bool:
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("pages:run_list")
    except NoReverseMatch:
        return False
    return True


def wire(settings: Any, *, urls_ready: bool | None = None) -> None:
    """Add the app, the CSP middleware and (unless ``dashboard.urls`` includes the
    pages already) the site URLconf. Works on ``django.conf.settings``, pytest-django's
    ``settings`` fixture, or a settings module before ``django.setup()``."""
    if APP not in settings.INSTALLED_APPS:
        settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, APP]
    if MIDDLEWARE not in settings.MIDDLEWARE:
        settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    if urls_ready is None:
        urls_ready = _platform_includes_pages(settings.ROOT_URLCONF)
    if not urls_ready:
        settings.ROOT_URLCONF = URLCONF


def _platform_includes_pages(urlconf: str) -> bool:
    import importlib

    try:
        module = importlib.import_module(urlconf)
    except Exception:
        return False
    return any(
        getattr(p, "namespace", None) == "pages"
        for p in getattr(module, "urlpatterns", [])
    )


def setup() -> None:
    """``django.setup()`` with the pages wired in (for scripts and subprocesses)."""
    import importlib
    import os

    import django
    from django.conf import settings

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    module = importlib.import_module(os.environ["DJANGO_SETTINGS_MODULE"])
    wire(module, urls_ready=True)  # the URLconf can only be inspected after setup
    django.setup()
    if not urls_included():
        settings.ROOT_URLCONF = URLCONF
        from django.urls import clear_url_caches

        clear_url_caches()


def main(argv: list[str] | None = None) -> None:
    """``python -m dashboard.pages.wiring manage ARGS...`` or ``... serve HOST PORT``:
    ``manage.py`` or a Daphne server, with the pages wired in."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    setup()
    if args[:1] == ["serve"]:
        from daphne.cli import CommandLineInterface

        host, port = args[1], args[2]
        CommandLineInterface().run(
            ["-b", host, "-p", port, "dashboard.asgi:application"]
        )
    else:
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", *args[1:]])


if __name__ == "__main__":
    main()
