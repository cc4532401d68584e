"""A server process's subscription to one channel group, and noticing when it broke.

channels-redis keeps a group's members in Redis. A Redis restarted without persistence
has forgotten them (so has a flush, or the layer's ``group_expiry``), and nothing tells
a member: its receive waits on a channel nobody sends to any more, and what is published
meanwhile goes nowhere. A connection can also die without an error (a half-open TCP
connection), and then a call on it hangs.

So a :class:`Subscription` checks itself. Any message from the group proves that
delivery works; when nothing came for ``probe_s`` it sends a probe to its own group and
expects it back within ``timeout_s``. A layer error, a probe that does not come back, or
a call that takes longer than ``timeout_s`` breaks the subscription: it joins again
(every ``retry_s`` while the layer refuses), then awaits ``on_resumed()`` so that its
owner can tell its listeners to catch up from the database, the source of truth. The
same happens when the very first join failed. While healthy it joins again every
``rejoin_s``, long before ``group_expiry`` could forget it.

Probes are messages of type :data:`PROBE`, never handed to ``on_message``; a probe
another process sent to the same group proves delivery too. This module knows nothing
of runs, frames or sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROBE = "live.probe"

Handler = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Timing:
    """The seconds a :class:`Subscription` works with (see the module docstring)."""

    probe_s: float = 5.0  # nothing heard this long: send a probe
    timeout_s: float = 5.0  # a probe not back, or a layer call not done, by then
    retry_s: float = 1.0  # between joins while the layer refuses
    rejoin_s: float = 600.0  # join again while healthy (group_expiry is a day)


class Subscription:
    """One plain channel in ``group``; :meth:`run` delivers its messages until
    cancelled, and leaves the group then."""

    def __init__(
        self,
        layer: Any,
        group: str,
        *,
        on_message: Handler,
        on_resumed: Callable[[], Awaitable[None]],
        timing: Timing | None = None,
    ) -> None:
        self.layer, self.group = layer, group
        self.on_message, self.on_resumed = on_message, on_resumed
        self.timing = timing or Timing()
        # A plain channel name (not the layer's process-local "specific." ones): its
        # receive is a direct blocking pop, with nothing shared to clean up on cancel.
        self.channel = f"dashboard-hub.{uuid.uuid4().hex}"
        self.joined = asyncio.Event()  # set while joined; cleared when it breaks
        self.breaks = 0  # how often it broke (or could not join at first)
        self._missed = False  # messages may have gone nowhere since the last join
        self._heard = 0.0
        self._rejoin_at = 0.0
        self._probe: str | None = None
        self._probe_back = asyncio.Event()

    async def run(self) -> None:
        """Join, deliver, check; join again whenever it broke. Until cancelled."""
        try:
            while True:
                if not await self._join():
                    await asyncio.sleep(self.timing.retry_s)
                    continue
                if self._missed:
                    self._missed = False
                    await self._resumed()
                reason = await self._watch()
                self.joined.clear()
                self._broke()
                log.warning("group %s: %s; joining again", self.group, reason)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self.layer.group_discard(self.group, self.channel), 2
                )

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _broke(self) -> None:
        if not self._missed:
            self.breaks += 1
        self._missed = True

    async def _join(self) -> bool:
        try:
            await within(
                self.layer.group_add(self.group, self.channel), self.timing.timeout_s
            )
        except Exception as exc:  # the broker is away (or too slow): try again
            if not self._missed:
                log.warning("group %s: could not join (%r)", self.group, exc)
            self._broke()
            return False
        self._rejoin_at = self._now() + self.timing.rejoin_s
        self.joined.set()
        return True

    async def _resumed(self) -> None:
        try:
            await self.on_resumed()
        except Exception:  # the owner's catching up must not end the subscription
            log.exception("group %s: on_resumed failed", self.group)

    async def _watch(self) -> str:
        """Deliver until the subscription breaks; returns why it broke."""
        self._heard = self._now()
        receiver = asyncio.ensure_future(self._receive())
        try:
            while True:
                done, _ = await asyncio.wait({receiver}, timeout=self.timing.probe_s)
                if done:
                    return f"receive failed ({_failure(receiver)})"
                if self._now() >= self._rejoin_at and not await self._join():
                    return "could not join again"
                if self._now() - self._heard >= self.timing.probe_s:
                    reason = await self._check(receiver)
                    if reason is not None:
                        return reason
        finally:
            receiver.cancel()
            await asyncio.wait({receiver}, timeout=2)

    async def _check(self, receiver: asyncio.Future) -> str | None:
        """Send a probe to the group; None once it came back, else what went wrong."""
        token = uuid.uuid4().hex
        self._probe = token
        self._probe_back.clear()
        probe = {"type": PROBE, "probe": token}
        try:
            await within(
                self.layer.group_send(self.group, probe), self.timing.timeout_s
            )
        except Exception as exc:
            return f"probe not sent ({exc!r})"
        back = asyncio.ensure_future(self._probe_back.wait())
        try:
            await asyncio.wait(
                {receiver, back},
                timeout=self.timing.timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            back.cancel()
        if receiver.done():
            return f"receive failed ({_failure(receiver)})"
        if not self._probe_back.is_set():
            return f"probe not back within {self.timing.timeout_s} s"
        return None

    async def _receive(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            self._heard = self._now()
            if message.get("type") == PROBE:
                if message.get("probe") == self._probe:
                    self._probe_back.set()
                continue
            try:
                await self.on_message(message)
            except Exception:  # one bad delivery must not end the subscription
                log.exception("group %s: on_message failed", self.group)


async def within(awaitable: Awaitable[Any], timeout: float) -> Any:
    """``asyncio.wait_for`` that never loses a cancellation. On Python 3.11 a task
    cancelled just as the awaited call finished gets the call's result from
    ``wait_for`` instead of its ``CancelledError`` (fixed in 3.12, gh-86296): a
    subscription whose last page left would run on, joined to its group, and a page
    opened later would get every frame twice."""
    result = await asyncio.wait_for(awaitable, timeout)
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    return result


def _failure(task: asyncio.Future) -> str:
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    return repr(exc) if exc is not None else "returned"
