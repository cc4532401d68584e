"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets are checked in order: the Origin must match ALLOWED_HOSTS (a foreign page
cannot open a socket with the user's cookies), then the session identifies the user;
the consumer itself checks that the run is theirs. Request bodies are bounded before
Django or authentication sees them (:mod:`dashboard.site.limits`).
"""

from __future__ import annotations

import asyncio
import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from dashboard.live import streaming  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402
from dashboard.site.limits import BodyLimit, install_daphne_limits  # noqa: E402

if "daphne.server" in sys.modules:  # Daphne buffers bodies: bound them as they arrive
    install_daphne_limits()


class RememberLoop:
    """Records the server's event loop for in-process frame publishing (embedded)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        streaming.remember_server_loop(asyncio.get_running_loop())
        return await self.app(scope, receive, send)


application = RememberLoop(
    ProtocolTypeRouter(
        {
            "http": BodyLimit(django_asgi_app),
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)
