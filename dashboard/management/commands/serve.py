"""``manage.py serve [--host H] [--port P] [--demo]``: migrate, then serve with Daphne.

In the embedded mode (no REDIS_URL) runs execute in this process, so it first
recovers what a previous process left queued or running. ``--demo`` runs
``bootstrap_demo`` first (embedded only). Production can use this too, or run
``daphne dashboard.asgi:application`` directly after ``manage.py migrate``.

Stopping it (Ctrl-C, SIGTERM) in the embedded mode stops the run in progress at its
next training step (or warm-start step), waits for it there (``STOP_WAIT_S`` at
most), and leaves it and the queued runs to the next start, which resumes them from
their last checkpoints.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

# How long stopping the server waits for the in-process run to reach its next step.
STOP_WAIT_S = 60.0


class Command(BaseCommand):
    help = "Migrate and serve HTTP + websockets (Daphne); embedded: also execute runs."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--demo", action="store_true", help="Create the demo user and run first."
        )
        parser.add_argument("--no-migrate", action="store_true")

    def handle(
        self, *args, host: str, port: int, demo: bool, no_migrate: bool, **options
    ):
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        from dashboard.ingest import webhooks

        webhooks.start()  # alert notifications left unsent by the last process
        if settings.RUN_EXECUTOR == "inprocess":
            from dashboard.runs import inprocess

            resumed = inprocess.recover()
            inprocess.start_housekeeping()
            if resumed:
                self.stdout.write(f"executing {len(resumed)} queued run(s) in-process")
        if demo and settings.EMBEDDED:
            call_command(
                "bootstrap_demo", stdout=self.stdout
            )  # a new run enqueues itself
        mode = "embedded" if settings.EMBEDDED else "production"
        self.stdout.write(f"serving ({mode}) on http://{host}:{port}/")
        self.stdout.flush()
        from daphne.cli import CommandLineInterface

        from dashboard.site.limits import install_daphne_limits

        install_daphne_limits()  # bodies bounded as they arrive
        try:
            CommandLineInterface().run(
                ["-b", host, "-p", str(port), "dashboard.asgi:application"]
            )
        finally:
            if settings.RUN_EXECUTOR == "inprocess":
                # The in-process run must not hold the exit until it ends (the long
                # demo takes half an hour): it stops at its next step, resumable,
                # and the exit waits for that step (STOP_WAIT_S at most).
                from dashboard.runs import inprocess

                if inprocess.executing():
                    self.stdout.write(
                        "stopping the run in progress at its next step (it resumes "
                        "from its last checkpoint at the next start)"
                    )
                    self.stdout.flush()
                if not inprocess.stop(STOP_WAIT_S):
                    self.stdout.write(
                        f"the run in progress did not stop within {STOP_WAIT_S:.0f} s; "
                        "exiting without it (it resumes at the next start)"
                    )
