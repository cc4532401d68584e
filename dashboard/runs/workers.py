"""Who can take a run: workers announce what they serve, submit reads it.

A Celery worker announces itself once it is ready (``dashboard.celery``) and again
every ``WORKER_ANNOUNCE_SECONDS`` from a thread of its parent process: a ``Worker``
row with the queues it consumes (without ``DASHBOARD_NAMESPACE``'s prefix), its CUDA
devices, the devices it gives one run and the memory of each (read through NVML for
a GPU, no CUDA initialised; the machine's RAM otherwise). It deletes the row when it
shuts down; a row not refreshed for three periods is a dead worker's and is ignored.
In the embedded mode the web process is the worker: :func:`offers` describes it
(every queue, CUDA when torch sees it).

This module knows the rows and the machine, not configs (``dashboard.runs.devices``
and ``dashboard.runs.budget`` match runs against the offers).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from dashboard.models import Worker

log = logging.getLogger(__name__)
LIVE_PERIODS = 3  # a row older than this many announce periods is a dead worker's


@dataclass(frozen=True)
class Offer:
    """What one worker serves."""

    name: str
    queues: tuple[str, ...]
    cuda_devices: int
    devices: int
    gpu_memory_bytes: int | None  # per CUDA device; None: no GPU, or not readable
    ram_bytes: int | None


def ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class _NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def gpu_memory_bytes() -> int | None:
    """The smallest total memory of this machine's GPUs, through NVML (as
    ``torch.cuda.device_count`` counts them: no CUDA context, safe before a fork);
    None without a driver."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        totals = []
        for i in range(count.value):
            handle, mem = ctypes.c_void_p(), _NvmlMemory()
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                continue
            if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == 0:
                totals.append(int(mem.total))
        return min(totals, default=None)
    finally:
        nvml.nvmlShutdown()


def local_offer(name: str, queues: list[str]) -> Offer:
    """What this machine serves when it consumes ``queues`` (prefix removed)."""
    from dashboard.runs import devices

    cuda = devices.cuda_devices()
    kinds = {q.split("-x")[0] for q in queues}
    most = max((devices.local_devices(k) for k in kinds), default=1)
    return Offer(
        name=name,
        queues=tuple(sorted(set(queues))),
        cuda_devices=cuda,
        devices=most,
        gpu_memory_bytes=gpu_memory_bytes() if cuda else None,
        ram_bytes=ram_bytes(),
    )


def embedded_offer() -> Offer:
    """The web process as the worker of the embedded mode: every queue it could be
    sent, CUDA only where torch can use it here."""
    import torch

    from dashboard.runs import devices

    queues = [
        devices.queue_name(kind, n)
        for kind in devices.KINDS
        for n in range(1, devices.local_devices(kind) + 1)
    ]
    offer = local_offer("this server", queues)
    if offer.cuda_devices and not torch.cuda.is_available():
        offer = Offer(offer.name, offer.queues, 0, offer.devices, None, offer.ram_bytes)
    return offer


def announce(offer: Offer) -> None:
    Worker.objects.update_or_create(
        name=offer.name,
        defaults={
            "queues": list(offer.queues),
            "cuda_devices": offer.cuda_devices,
            "devices": offer.devices,
            "gpu_memory_bytes": offer.gpu_memory_bytes,
            "ram_bytes": offer.ram_bytes,
            "seen_at": timezone.now(),
        },
    )


def forget(name: str) -> None:
    Worker.objects.filter(name=name).delete()


def live_offers() -> list[Offer]:
    """The announcements of the workers alive now."""
    since = timezone.now() - timedelta(
        seconds=settings.WORKER_ANNOUNCE_SECONDS * LIVE_PERIODS
    )
    rows = Worker.objects.filter(seen_at__gte=since)
    return [
        Offer(
            w.name,
            tuple(w.queues),
            w.cuda_devices,
            w.devices,
            w.gpu_memory_bytes,
            w.ram_bytes,
        )
        for w in rows
    ]


def offers() -> list[Offer]:
    """Who can take a run now: the live workers, or this process (embedded)."""
    if settings.RUN_EXECUTOR == "inprocess":
        return [embedded_offer()]
    return live_offers()


def start_announcing(offer: Offer, stop: threading.Event) -> threading.Thread:
    """Announce ``offer`` now and every WORKER_ANNOUNCE_SECONDS until ``stop``."""

    def loop() -> None:
        while True:
            try:
                announce(offer)
            except DatabaseError as exc:  # the database is down: try next period
                log.warning("worker %s: announce failed: %r", offer.name, exc)
            finally:
                # No connection left open in a process that forks its children.
                connection.close()
            if stop.wait(settings.WORKER_ANNOUNCE_SECONDS):
                return

    thread = threading.Thread(target=loop, name="announce", daemon=True)
    thread.start()
    return thread
