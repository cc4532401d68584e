from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from dashboard.api import api
from dashboard.site import views

urlpatterns = [
    path("", include("dashboard.pages.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("healthz", views.healthz, name="healthz"),
]

handler404 = "dashboard.site.views.not_found"
