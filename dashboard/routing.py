from __future__ import annotations

from django.urls import path, re_path

from dashboard.consumers import NoRouteConsumer, RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<uuid:run_id>/", RunConsumer.as_asgi()),
    re_path(r"", NoRouteConsumer.as_asgi()),  # last: any other path, a newline's too
]
