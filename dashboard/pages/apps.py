from __future__ import annotations

from django.apps import AppConfig


class PagesConfig(AppConfig):
    """The HTML pages (templates tags live in ``dashboard/pages/templatetags``)."""

    name = "dashboard.pages"
    label = "pages"
    verbose_name = "Pages"
