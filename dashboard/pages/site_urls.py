"""The whole site with the pages at the root: the platform's URLs, with the pages'
patterns first so they replace the platform's placeholder pages at ``/`` and
``/runs/``. Used by the tests and the UI benchmark until ``dashboard.urls`` includes
``dashboard.pages.urls`` itself; then it is equivalent.
"""

from __future__ import annotations

from django.urls import include, path

from dashboard.urls import urlpatterns as platform_urlpatterns

urlpatterns = [
    path("", include("dashboard.pages.urls")),
    *[p for p in platform_urlpatterns if getattr(p, "namespace", None) != "pages"],
]
