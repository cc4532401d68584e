"""The Celery app. Settings come from Django (``CELERY_*``); tasks from ``dashboard.runs.jobs``.

Start a worker per device: ``celery -A dashboard worker -Q gpu -c 1 --prefetch-multiplier 1``
(``-Q cpu`` on CPU-only hosts). A worker with several devices (``WORKER_DEVICES``, or
the CUDA devices it sees) also consumes ``gpu-x2`` .. ``gpu-xN``, the queues of runs
of several processes (``dashboard.runs.devices``): started with ``-Q gpu`` on a 4-GPU host,
it takes runs of 1 to 4 processes. Nothing here initialises CUDA: that happens only in
the prefork child that runs the task, never in the parent that forks it (the device
count is read through NVML).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import celeryd_after_setup

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
