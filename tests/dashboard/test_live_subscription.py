"""A hub's subscription to a run's group survives the layer's failures (issue 21, item
8): a Redis that restarted and forgot the group's members, a layer that refuses every
call for a while, a call that hangs on a dead connection. Each time it joins again and
says so, and the run's pages get a fresh hello from the database.

The layer is a :class:`FlakyLayer`: the in-memory layer with those failures on demand.
Timings are shortened to hundredths of a second; every wait below is a deadline on
something that must happen, never a measured duration."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.layers import InMemoryChannelLayer

from dashboard.live.subscription import PROBE, Subscription, Timing

FAST = Timing(probe_s=0.05, timeout_s=0.3, retry_s=0.02, rejoin_s=600.0)
# Where a test asserts that nothing broke, a probe gets long enough to come back even
# on a loaded machine; so do the pages' tests, which count every hello.
PATIENT = Timing(probe_s=0.05, timeout_s=2.0, retry_s=0.02, rejoin_s=600.0)
PAGES = Timing(probe_s=0.1, timeout_s=1.0, retry_s=0.05, rejoin_s=600.0)


class FlakyLayer(InMemoryChannelLayer):
    """The in-memory layer, plus what Redis does to a member when it goes wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False  # every call raises, as with Redis stopped
        self.hung = False  # receives never return, as on a half-open connection
        self.calls: list[str] = []

    def forget(self) -> None:
        """Redis restarted without persistence: every group is empty, silently."""
        self.groups.clear()

    def _gate(self, name: str) -> None:
        self.calls.append(name)
        if self.down:
            raise ConnectionError("Error 111 connecting to redis")

    async def group_add(self, group, channel):
        self._gate("group_add")
        await super().group_add(group, channel)

    async def group_send(self, group, message):
        self._gate("group_send")
        await super().group_send(group, message)

    async def receive(self, channel):
        self._gate("receive")
        while self.hung:
            await asyncio.sleep(0.01)
        return await super().receive(channel)

    def members(self, group: str) -> list[str]:
        return list(self.groups.get(group, {}))


async def until(predicate, timeout: float = 5.0, message: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(0.01)


class Watcher:
    """A subscription to group ``g`` with what it delivered and how often it resumed."""

    def __init__(self, layer: FlakyLayer, timing: Timing = FAST) -> None:
        self.got: list[dict] = []
        self.resumed = 0
        self.sub = Subscription(
            layer,
            "g",
            on_message=self.on_message,
            on_resumed=self.on_resumed,
            timing=timing,
        )
        self.task: asyncio.Task | None = None

    async def on_message(self, message: dict) -> None:
        self.got.append(message)

    async def on_resumed(self) -> None:
        self.resumed += 1

    async def __aenter__(self) -> Watcher:
        self.task = asyncio.ensure_future(self.sub.run())
        return self

    async def __aexit__(self, *exc) -> None:
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=2)

    def texts(self) -> list[str]:
        return [m["text"] for m in self.got]


async def send(layer: FlakyLayer, text: str) -> None:
    await InMemoryChannelLayer.group_send(
        layer, "g", {"type": "run.frame", "text": text}
    )


async def test_frames_are_delivered_and_probes_are_not():
    layer = FlakyLayer()
    async with Watcher(layer, PATIENT) as w:
        await asyncio.wait_for(w.sub.joined.wait(), 2)
        await send(layer, "a")
        await until(lambda: w.texts() == ["a"], message="frame a")
        await until(lambda: layer.calls.count("group_send") >= 3, message="probes")
        await send(layer, "b")
        await until(lambda: w.texts() == ["a", "b"], message="frame b")
        assert all(m["type"] != PROBE for m in w.got)
        assert (w.sub.breaks, w.resumed) == (0, 0)  # a healthy group never "broke"


async def test_a_probe_from_another_process_counts_as_delivery():
    layer = FlakyLayer()
    timing = Timing(probe_s=0.3, timeout_s=2.0, retry_s=0.02)
    async with Watcher(layer, timing) as w:
        await asyncio.wait_for(w.sub.joined.wait(), 2)
        sent = layer.calls.count("group_send")
        for _ in range(20):  # another hub's probes, more often than probe_s
            await send_probe(layer)
            await asyncio.sleep(0.05)
        assert layer.calls.count("group_send") == sent  # it sent none of its own
        assert w.got == [] and w.sub.breaks == 0


async def send_probe(layer: FlakyLayer) -> None:
    await InMemoryChannelLayer.group_send(layer, "g", {"type": PROBE, "probe": "x"})


async def test_a_group_that_forgot_its_member_is_joined_again_and_resumed():
    layer = FlakyLayer()
    async with Watcher(layer) as w:
        await asyncio.wait_for(w.sub.joined.wait(), 2)
        layer.forget()  # Redis restarted; no error reaches anyone
        await send(layer, "lost")  # published while nobody is a member
        await until(lambda: w.resumed == 1, message="the subscription to resume")
        assert layer.members("g") == [w.sub.channel] and w.sub.breaks == 1
        await send(layer, "after")
        await until(lambda: w.texts() == ["after"], message="the frame after")


async def test_a_layer_that_refuses_is_retried_and_resumed_once_it_answers():
    layer = FlakyLayer()
    async with Watcher(layer) as w:
        await asyncio.wait_for(w.sub.joined.wait(), 2)
        layer.down = True
        layer.forget()
        await until(lambda: layer.calls.count("group_add") >= 4, message="retries")
        assert w.resumed == 0 and not w.sub.joined.is_set()
        assert w.sub.breaks == 1  # one outage, however many retries
        layer.down = False
        await until(lambda: w.resumed == 1, message="the subscription to resume")
        await send(layer, "back")
        await until(lambda: w.texts() == ["back"], message="the frame after")


async def test_a_receive_that_hangs_is_abandoned_for_a_new_one():
    layer = FlakyLayer()
    async with Watcher(layer) as w:
        await asyncio.wait_for(w.sub.joined.wait(), 2)
        layer.hung = True  # the receive in progress waits on, a new one would too
        await until(lambda: w.sub.breaks == 1, message="the probe to go missing")
        layer.hung = False
        await until(lambda: w.resumed == 1, message="the subscription to resume")
        await send(layer, "back")
        await until(lambda: "back" in w.texts(), message="the frame after")


async def test_a_first_join_that_failed_resumes_once_it_succeeds():
    layer = FlakyLayer()
    layer.down = True
    async with Watcher(layer) as w:
        await until(lambda: layer.calls.count("group_add") >= 2, message="retries")
        layer.down = False
        await until(lambda: w.resumed == 1, message="the subscription to resume")
        assert w.sub.joined.is_set()


async def test_a_cancelled_subscription_leaves_its_group():
    layer = FlakyLayer()
    async with Watcher(layer) as w:
        await asyncio.wait_for(w.sub.joined.wait(), 2)
        assert layer.members("g") == [w.sub.channel]
    assert layer.members("g") == []


class CancelledAsItAnswers(FlakyLayer):
    """A layer whose ``name`` call cancels the subscription's task once it has its
    answer: the cancel and the answer arrive together (a page leaving while a join
    or a probe is answered)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name, self.task = name, None

    def _answered(self, name: str) -> None:
        if name == self.name and self.task is not None:
            self.task.cancel()
            self.task = None

    async def group_add(self, group, channel):
        await super().group_add(group, channel)
        self._answered("group_add")

    async def group_send(self, group, message):
        await super().group_send(group, message)
        self._answered("group_send")


@pytest.mark.parametrize("call", ["group_add", "group_send"])
async def test_a_cancel_that_arrives_with_the_layers_answer_still_ends_the_subscription(
    call,
):
    """On Python 3.11 ``asyncio.wait_for`` returns the answer and drops the cancel
    (gh-86296); the subscription would run on, joined, and a page opened later on
    the same run would get each frame twice."""
    layer = CancelledAsItAnswers(call)
    watcher = Watcher(layer)
    async with watcher:
        layer.task = watcher.task
        done, _ = await asyncio.wait({watcher.task}, timeout=3)
        assert done, f"a cancel during {call} was lost: the subscription runs on"
        assert watcher.task.cancelled()
    assert layer.members("g") == []


# --- the hub and the run page's socket -------------------------------------------------
@pytest.fixture
def flaky(monkeypatch):
    """A FlakyLayer as the default channel layer, and the hub's timing shortened."""
    from channels.layers import channel_layers

    from dashboard import consumers

    layer = FlakyLayer()
    monkeypatch.setitem(channel_layers.backends, "default", layer)
    monkeypatch.setattr(consumers, "TIMING", PAGES, raising=False)
    return layer


async def _page(user, run_id):
    from test_run_authz import _connect

    comm, connected, _ = await _connect(user, run_id)
    assert connected
    return comm


@pytest.mark.django_db(transaction=True)
async def test_a_page_gets_the_final_status_its_lost_frame_carried(owner, run, flaky):
    from dashboard.models import Run

    comm = await _page(owner, run.id)
    first = json.loads(await comm.receive_from(timeout=5))
    assert (first["type"], first["status"]) == ("hello", "running")
    flaky.forget()
    # The run ends while the group has no members: its last frame goes nowhere.
    await sync_to_async(Run.objects.filter(pk=run.pk).update)(
        status="succeeded", frame_seq=first["frame_seq"] + 1
    )
    again = json.loads(await comm.receive_from(timeout=5))
    assert again == {
        "type": "hello",
        "run": str(run.id),
        "status": "succeeded",
        "last_step": 6,
        "frame_seq": first["frame_seq"] + 1,
    }
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_pages_get_frames_again_after_the_layer_came_back(owner, run, flaky):
    from dashboard.live import frames
    from dashboard.live.frames import FrameParts

    pages = [await _page(owner, run.id) for _ in range(2)]
    for comm in pages:
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "hello"
    flaky.down = True
    flaky.forget()
    await until(lambda: flaky.calls.count("group_add") >= 3, message="retries")
    flaky.down = False
    for comm in pages:  # the resync first, then the frames published after it
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "hello"
    await sync_to_async(frames.send)(run.id, FrameParts(steps={7: {"reward": 1.0}}))
    for comm in pages:
        frame = json.loads(await comm.receive_from(timeout=5))
        assert frame["type"] == "frame" and frame["steps"][0]["step"] == 7
    for comm in pages:
        await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_page_whose_run_was_deleted_meanwhile_is_closed(owner, run, flaky):
    from dashboard.models import Run

    comm = await _page(owner, run.id)
    await comm.receive_from(timeout=5)  # hello
    flaky.forget()
    await sync_to_async(Run.objects.filter(pk=run.pk).delete)()
    out = await comm.receive_output(timeout=5)
    assert out == {"type": "websocket.close", "code": 4404}
    await comm.disconnect()
