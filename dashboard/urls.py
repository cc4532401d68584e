from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from dashboard import views
from dashboard.api import api

urlpatterns = [
    path("", include("dashboard.pages.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("healthz", views.healthz, name="healthz"),
]

handler404 = "dashboard.views.not_found"
