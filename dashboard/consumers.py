"""The run page's websocket, and the per-process hub that fans frames out to it.

At connect: anonymous users and runs that are not the user's are refused with close
codes 4401 and 4404. The handshake is accepted first and then closed with the code:
a close before the accept is a handshake rejection, which servers answer with an
HTTP 403 and browsers see as code 1006. (A foreign Origin never gets here, see
``dashboard.asgi``: that handshake is rejected.) Then
it sends a ``hello`` (status, last_step, frame_seq: where to backfill from) and
forwards the run's frames. No ORM here: the one lookup goes through
``services.aget_run_for_user``. Frames arrive JSON-encoded from the sink and are sent
verbatim; clients send nothing we act on.

Fan-out: a page does not join the channel group itself. Each server process joins
``run-<id>`` once, with one hub channel, while it has pages open on that run, and
copies every frame to its local sockets. With channels' usual one-channel-per-socket
groups, 200 open pages cost 200 Redis messages per frame; here they cost one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

from dashboard.live import streaming
from dashboard.runs import services

log = logging.getLogger(__name__)
REJOIN_S = 600.0  # channels-redis forgets group members after group_expiry (a day)


class RunHub:
    """One per event loop: run id -> the sockets of this process watching it."""

    def __init__(self) -> None:
        self.sockets: dict[str, set[RunConsumer]] = {}
        self.readers: dict[str, asyncio.Task] = {}
        self.subscribed: dict[str, asyncio.Event] = {}

    async def join(self, run_id: str, consumer: RunConsumer) -> None:
        """Add the socket; returns once the run's group is subscribed (or after 5 s
        if the broker is away: the page backfills), so that every frame published
        after this returns reaches the socket."""
        self.sockets.setdefault(run_id, set()).add(consumer)
        if run_id not in self.readers:
            self.subscribed[run_id] = asyncio.Event()
            self.readers[run_id] = asyncio.get_running_loop().create_task(
                self._read(run_id)
            )
        ready = self.subscribed.get(run_id)
        if ready is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ready.wait(), 5)

    async def leave(self, run_id: str, consumer: RunConsumer) -> None:
        sockets = self.sockets.get(run_id)
        if sockets is None:
            return
        sockets.discard(consumer)
        if not sockets:
            del self.sockets[run_id]
            self.subscribed.pop(run_id, None)
            task = self.readers.pop(run_id, None)
            if task is not None:
                task.cancel()
                await asyncio.wait({task}, timeout=5)  # let it leave the group

    async def _read(self, run_id: str) -> None:
        layer, group = get_channel_layer(), streaming.group_name(run_id)
        # A plain channel name (not the layer's process-local "specific." ones): its
        # receive is a direct blocking pop, with nothing shared to clean up on cancel.
        channel = f"dashboard-hub.{uuid.uuid4().hex}"
        try:
            while run_id in self.sockets:
                try:
                    await layer.group_add(group, channel)
                    if run_id in self.subscribed:
                        self.subscribed[run_id].set()
                    deadline = asyncio.get_running_loop().time() + REJOIN_S
                    while asyncio.get_running_loop().time() < deadline:
                        message = await layer.receive(channel)
                        await self._deliver(run_id, message.get("text"))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the broker went away: retry, pages backfill
                    log.warning("hub for run %s: %r; rejoining", run_id, exc)
                    await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(layer.group_discard(group, channel), 2)

    async def _deliver(self, run_id: str, text: Any) -> None:
        if not isinstance(text, str):
            return
        for consumer in list(self.sockets.get(run_id, ())):
            with contextlib.suppress(Exception):  # a socket closing under us
                await consumer.frame(text)


_hubs: dict[asyncio.AbstractEventLoop, RunHub] = {}


def hub() -> RunHub:
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        for old in [x for x in _hubs if x.is_closed()]:
            del _hubs[old]
        _hubs[loop] = RunHub()
    return _hubs[loop]


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
        run = await services.aget_run_for_user(user, self.run_id) or run
        hello = {
            "type": "hello",
            "run": str(run.pk),
            "status": run.status,
            "last_step": run.last_step,
            "frame_seq": run.frame_seq,
        }
        await self.send(text_data=json.dumps(hello))
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

    async def disconnect(self, code: int) -> None:
        if self.run_id is not None:
            await hub().leave(self.run_id, self)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None
    ) -> None:
        """Clients have nothing to say; ignore whatever they send."""
