from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from dashboard.api import api
from dashboard.api import trackio as trackio_api
from dashboard.site import views

urlpatterns = [
    path("", include("dashboard.pages.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    # trackio's self-hosted HTTP API: TRACKIO_SERVER_URL=http://HOST/trackio/?write_token=
    path("trackio/", include(trackio_api.urlpatterns)),
    path("healthz", views.healthz, name="healthz"),
]

handler404 = "dashboard.site.views.not_found"
