"""``manage.py reap_runs [--interval S]``: requeue runs whose worker stopped heartbeating,
and mark external runs that stopped reporting as lost.

Run one of these next to the workers in production (or schedule
``dashboard.reap_runs`` with celery beat on a queue no long task blocks).
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from dashboard.runs import external, lease


class Command(BaseCommand):
    help = "Requeue (or mark unresponsive) runs whose heartbeat stopped."

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval",
            type=float,
            default=0.0,
            help="Seconds between passes; 0: one pass.",
        )

    def handle(self, *args, interval: float, **options):
        while True:
            close_old_connections()
            for run_id in lease.reap():
                self.stdout.write(f"requeued {run_id}")
            for run_id in external.mark_lost():
                self.stdout.write(f"lost {run_id}")
            self.stdout.flush()
            if interval <= 0:
                return
            time.sleep(interval)
