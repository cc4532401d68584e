"""The run page's websocket, and the per-process hub that fans frames out to it.

At connect: anonymous users and runs that are not the user's are refused with close
codes 4401 and 4404, as is any path no socket lives at (:class:`NoRouteConsumer`).
The handshake is accepted first and then closed with the code: a close before the
accept is a handshake rejection, which servers answer with an HTTP 403 and browsers
see as code 1006. (A foreign Origin never gets here, see
``dashboard.asgi``: that handshake is rejected.) Then
it sends a ``hello`` (status, last_step, frame_seq: where to backfill from) and
forwards the run's frames. No ORM here: the lookups go through
``services.aget_run_for_user`` and ``reads.stream.position``. Frames arrive
JSON-encoded from the sink and are sent verbatim; clients send nothing we act on.

Fan-out: a page does not join the channel group itself. Each server process joins
``run-<id>`` once, with one hub channel, while it has pages open on that run, and
copies every frame to its local sockets. With channels' usual one-channel-per-socket
groups, 200 open pages cost 200 Redis messages per frame; here they cost one.

Outages: the hub's membership is a :class:`~dashboard.live.subscription.Subscription`,
which notices when the group stopped delivering (Redis restarted and forgot its
members, an error, a call that hangs) and joins again. Frames published meanwhile
went nowhere, so every socket of that run then gets a second ``hello``, read from the
database; the page treats it like the first one and backfills what it lacks (the
socket stays open). A run deleted meanwhile closes its sockets with 4404.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

from dashboard.live import streaming
from dashboard.live.subscription import Subscription, Timing, within
from dashboard.reads import stream
from dashboard.runs import services

log = logging.getLogger(__name__)
# How a hub checks its subscription (dashboard.live.subscription.Timing); read at
# each join, so tests can shorten it.
TIMING = Timing()
JOIN_WAIT_S = 5.0  # a page waits this long for the group before its hello


class RunHub:
    """One per event loop: run id -> the sockets of this process watching it."""

    def __init__(self) -> None:
        self.sockets: dict[str, set[RunConsumer]] = {}
        self.readers: dict[str, asyncio.Task] = {}
        self.subscriptions: dict[str, Subscription] = {}

    async def join(self, run_id: str, consumer: RunConsumer) -> None:
        """Add the socket; returns once the run's group is joined, so that every frame
        published after this returns reaches the socket. If the broker is away it
        returns after ``JOIN_WAIT_S``, and the socket gets a fresh hello once the group
        is joined (see :meth:`_resync`)."""
        self.sockets.setdefault(run_id, set()).add(consumer)
        sub = self.subscriptions.get(run_id)
        if sub is None:
            sub = Subscription(
                get_channel_layer(),
                streaming.group_name(run_id),
                on_message=functools.partial(self._deliver, run_id),
                on_resumed=functools.partial(self._resync, run_id),
                timing=TIMING,
            )
            self.subscriptions[run_id] = sub
            self.readers[run_id] = asyncio.get_running_loop().create_task(sub.run())
        with contextlib.suppress(asyncio.TimeoutError):
            await within(sub.joined.wait(), JOIN_WAIT_S)

    async def leave(self, run_id: str, consumer: RunConsumer) -> None:
        sockets = self.sockets.get(run_id)
        if sockets is None:
            return
        sockets.discard(consumer)
        if not sockets:
            del self.sockets[run_id]
            self.subscriptions.pop(run_id, None)
            task = self.readers.pop(run_id, None)
            if task is not None:
                task.cancel()
                await asyncio.wait({task}, timeout=5)  # let it leave the group

    async def _deliver(self, run_id: str, message: dict[str, Any]) -> None:
        text = message.get("text")
        if not isinstance(text, str):
            return
        for consumer in list(self.sockets.get(run_id, ())):
            with contextlib.suppress(Exception):  # a socket closing under us
                await consumer.frame(text)

    async def _resync(self, run_id: str) -> None:
        """The group was broken (or never joined): frames may have gone nowhere, the
        run's final status among them. Each socket gets a fresh hello, read from the
        database, and its page backfills what it lacks."""
        if not self.sockets.get(run_id):
            return
        at = await database_sync_to_async(stream.position)(run_id)
        for consumer in list(self.sockets.get(run_id, ())):
            with contextlib.suppress(Exception):
                await consumer.resync(at)


_hubs: dict[asyncio.AbstractEventLoop, RunHub] = {}


def hub() -> RunHub:
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        for old in [x for x in _hubs if x.is_closed()]:
            del _hubs[old]
        _hubs[loop] = RunHub()
    return _hubs[loop]


def hello(run_id: str, at: dict[str, Any]) -> str:
    """The message a page starts from (and starts again from after a resync)."""
    keys = ("status", "last_step", "frame_seq")
    return json.dumps({"type": "hello", "run": run_id, **{k: at[k] for k in keys}})


class RunConsumer(AsyncWebsocketConsumer):
    channel_layer_alias = None  # frames come through the hub, not a channel per socket
    run_id: str | None = None
    held: list[str] | None = None  # frames that arrived before the hello was sent

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(4401, "login required")
            return
        run = await services.aget_run_for_user(
            user, self.scope["url_route"]["kwargs"]["run_id"]
        )
        if run is None:
            await self.refuse(4404, "no such run")
            return
        await self.accept()
        # Subscribe first, then read the run for the hello: a frame published in
        # between (a run's last status frame, say) is held and sent after the hello
        # instead of being lost.
        self.run_id, self.held = str(run.pk), []
        await hub().join(self.run_id, self)
        at = await database_sync_to_async(stream.position)(self.run_id)
        if at is None:  # deleted meanwhile
            await self.close(code=4404)
            return
        await self.send(text_data=hello(self.run_id, at))
        while self.held:
            await self.send(text_data=self.held.pop(0))
        self.held = None

    async def refuse(self, code: int, reason: str) -> None:
        """Accept, then close with ``code``: the only way the client sees it."""
        await self.accept()
        await self.close(code=code, reason=reason)

    async def frame(self, text: str) -> None:
        """A frame from the hub: sent, or held until the hello has gone out."""
        if self.held is not None:
            self.held.append(text)
        else:
            await self.send(text_data=text)

    async def resync(self, at: dict[str, Any] | None) -> None:
        """A fresh hello (``at``: ``reads.stream.position``) after the hub's group
        was broken; 4404 when the run is gone."""
        if at is None:
            await self.close(code=4404)
        elif self.run_id is not None:
            await self.frame(hello(self.run_id, at))

    async def disconnect(self, code: int) -> None:
        if self.run_id is not None:
            await hub().leave(self.run_id, self)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None
    ) -> None:
        """Clients have nothing to say; ignore whatever they send."""


class NoRouteConsumer(AsyncWebsocketConsumer):
    """Any websocket path but a run's: closed with 4404. Without it Channels raises
    "No route found", which Daphne logs with a traceback and answers 500, so anyone
    (no login needed) could fill the log."""

    channel_layer_alias = None

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=4404, reason="no such socket")
