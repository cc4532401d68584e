"""The Celery app. Settings come from Django (``CELERY_*``); tasks from ``dashboard.runs.jobs``.

Start a worker per device: ``celery -A dashboard worker -Q gpu -c 1 --prefetch-multiplier 1``
(``-Q cpu`` on CPU-only hosts). A worker with several devices (``WORKER_DEVICES``, or
the CUDA devices it sees) also consumes ``gpu-x2`` .. ``gpu-xN``, the queues of runs
of several processes (``dashboard.runs.devices``): started with ``-Q gpu`` on a 4-GPU host,
it takes runs of 1 to 4 processes. Nothing here initialises CUDA: that happens only in
the prefork child that runs the task, never in the parent that forks it (the device
count is read through NVML).

Once ready, a worker announces what it serves (``dashboard.runs.workers``: its queues,
devices and memory, refreshed every ``WORKER_ANNOUNCE_SECONDS``), so that submit can
refuse a run no live worker takes; it withdraws the announcement when it stops. It
also sends the alert notifications that are due (``dashboard.ingest.webhooks``).
"""

from __future__ import annotations

import os
import threading

from celery import Celery
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dashboard.runs"], related_name="jobs")


@celeryd_after_setup.connect
def consume_multi_device_queues(sender: str, instance, **kwargs) -> None:
    """After ``-Q``: add the ``-xN`` queues of the devices this worker has."""
    from django.conf import settings

    from dashboard.runs import devices

    queues = instance.app.amqp.queues
    for name in devices.extra_queues(
        list(queues.consume_from), settings.RUN_QUEUE_PREFIX, devices.local_devices
    ):
        queues.select_add(name, exchange=name, routing_key=name)  # as -Q does


_announcing: dict[str, threading.Event] = {}


def _unprefixed(queues, prefix: str) -> list[str]:
    return [q[len(prefix) :] for q in queues if q.startswith(prefix)]


@worker_ready.connect
def announce_worker(sender, **kwargs) -> None:
    """Start announcing this worker's queues, devices and memory."""
    from django.conf import settings

    from dashboard.runs import workers

    consumed = list(sender.app.amqp.queues.consume_from)
    offer = workers.local_offer(
        sender.hostname, _unprefixed(consumed, settings.RUN_QUEUE_PREFIX)
    )
    stop = _announcing.setdefault(sender.hostname, threading.Event())
    workers.start_announcing(offer, stop)
    # Alert notifications a stopped process left unsent go out from here (the
    # prefork children start their own sender when they store an alert).
    from dashboard.ingest import webhooks

    webhooks.start()


@worker_shutdown.connect
def withdraw_worker(sender, **kwargs) -> None:
    """Stop announcing; the row goes, so submit stops counting on this worker."""
    from django.db import DatabaseError, connection

    from dashboard.runs import workers

    for name, stop in list(_announcing.items()):
        stop.set()
        try:
            workers.forget(name)
        except DatabaseError:  # the row ages out by itself
            pass
        finally:
            connection.close()
