"""Devices: which queue a run goes to, and how many processes a worker can give one run.

A run of N processes needs a worker with N devices (one rank per device). Runs are
routed by queue: ``gpu`` or ``cpu`` for one process, ``gpu-x2``, ``cpu-x4``... for
several. A worker with D devices consumes its kind's queues ``-x2`` to ``-xD`` besides
the plain one (``dashboard.celery`` adds them when the worker starts), so it takes any
run it can hold and no run it cannot.

A worker's devices (``local_devices``): ``WORKER_DEVICES`` when set; otherwise the CUDA
devices it sees, and a machine without any counts its CPU cores (a gloo rank per core;
an ``auto`` run trains on the CPU there). The web process cannot see the workers, so
submit trusts ``RUN_MAX_PROCESSES`` (the largest worker of the deployment); in the
embedded mode the web process is the worker and counts its own devices.

Counting CUDA devices goes through NVML (``torch.cuda.device_count``), which does not
initialise CUDA: safe in a Celery parent that forks its children afterwards.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings

KINDS = ("gpu", "cpu")


def kind_of(config: Any) -> str:
    """``gpu`` or ``cpu`` from ``model.device``. ``auto`` follows RUN_QUEUE_AUTO, but
    in the embedded mode, where this process trains the run and no queue routes it,
    the device it will train on says (a CPU-only laptop's run read queue ``gpu``)."""
    device = config.model.device
    if device == "cuda":
        return "gpu"
    if device == "cpu":
        return "cpu"
    if settings.RUN_EXECUTOR == "inprocess":
        return "gpu" if cuda_usable() else "cpu"
    return settings.RUN_QUEUE_AUTO


def cuda_usable() -> bool:
    """Whether this process trains an ``auto`` run on CUDA, as the trainer decides
    (``torch.cuda.is_available``: a driver NVML counts may still be unusable)."""
    import torch

    return bool(cuda_devices()) and torch.cuda.is_available()


def queue_name(kind: str, processes: int) -> str:
    return kind if processes <= 1 else f"{kind}-x{processes}"


def queue_for(config: Any) -> str:
    """The queue of a run: its kind, suffixed ``-xN`` when it asks for N > 1 processes."""
    return queue_name(kind_of(config), config.resources.processes)


def cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def local_devices(kind: str) -> int:
    """How many processes this machine gives one run of ``kind``."""
    if settings.WORKER_DEVICES:
        return settings.WORKER_DEVICES
    if kind == "gpu" and (n := cuda_devices()):
        return n
    return os.cpu_count() or 1


def extra_queues(consumed: list[str], prefix: str, devices_of: Any) -> list[str]:
    """The ``-xN`` queues (N = 2 .. devices) of each plain queue a worker consumes;
    ``devices_of(kind)`` says how many devices it has for that kind."""
    out = []
    for kind in KINDS:
        if f"{prefix}{kind}" in consumed:
            out += [
                f"{prefix}{queue_name(kind, n)}"
                for n in range(2, devices_of(kind) + 1)
                if f"{prefix}{queue_name(kind, n)}" not in consumed
            ]
    return out


def max_processes(kind: str) -> int:
    """The most processes a run of ``kind`` may ask for at submit: RUN_MAX_PROCESSES
    when set; else this process's own devices when it executes the runs (embedded
    mode), and 1 with Celery workers, which the web process cannot count."""
    if settings.RUN_MAX_PROCESSES:
        return settings.RUN_MAX_PROCESSES
    if settings.RUN_EXECUTOR == "inprocess":
        return local_devices(kind)
    return 1


def takers(config: Any, offers: list[Any]) -> list[Any]:
    """The offers (``dashboard.runs.workers.Offer``) that would take ``config``: they
    consume its queue and, for ``model.device: cuda``, have the CUDA devices."""
    queue = queue_for(config)
    cuda = config.model.device == "cuda"
    return [
        o
        for o in offers
        if queue in o.queues
        and (not cuda or o.cuda_devices >= config.resources.processes)
    ]


def served_devices(offers: list[Any]) -> list[str]:
    """The ``model.device`` values some offer takes (runs of one process)."""
    out = []
    if any("cpu" in o.queues for o in offers):
        out.append("cpu")
    if any("gpu" in o.queues and o.cuda_devices for o in offers):
        out.append("cuda")
    if any(settings.RUN_QUEUE_AUTO in o.queues for o in offers):
        out.append("auto")
    return out


def check_served(config: Any, offers: list[Any]) -> list[str]:
    """Nothing queued that no live worker takes (``RUN_REFUSE_UNSERVED``)."""
    if not settings.RUN_REFUSE_UNSERVED or takers(config, offers):
        return []
    device, queue = config.model.device, queue_for(config)
    need = " with CUDA" if device == "cuda" else ""
    served = ", ".join(served_devices(offers)) or "none (no worker is announcing)"
    return [
        f"config.model.device: no live worker takes a run with model.device "
        f"{device!r} (queue {queue}{need}); model.device served now: {served}"
    ]
