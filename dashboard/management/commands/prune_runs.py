"""``manage.py prune_runs --older-than DAYS``: drop old runs' per-token arrays (and,
with ``--trajectories``, whole trajectories); see :mod:`dashboard.ingest.retention`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from dashboard.ingest import retention


class Command(BaseCommand):
    help = (
        "Drop the per-token arrays (and with --trajectories the trajectories) of runs "
        "finished more than DAYS ago; metrics, alerts and judgements are kept."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--older-than", type=float, required=True, metavar="DAYS")
        parser.add_argument(
            "--trajectories",
            action="store_true",
            help="Delete whole trajectories, not only their per-token arrays.",
        )
        parser.add_argument(
            "--keep-recorded",
            action="store_true",
            help="Keep each step's best, worst and alerted groups whole.",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would go; change nothing."
        )

    def handle(self, *args, **opts) -> None:
        days = opts["older_than"]
        if not days >= 0:
            raise CommandError("--older-than: must be a number of days >= 0")
        done = retention.prune(
            days,
            trajectories=opts["trajectories"],
            keep_recorded=opts["keep_recorded"],
            dry_run=opts["dry_run"],
        )
        verb = "would prune" if opts["dry_run"] else "pruned"
        for p in done:
            self.stdout.write(
                f"{p.run_id} {p.name}: {verb} arrays of {p.arrays} rows, "
                f"{p.trajectories} trajectories"
            )
        self.stdout.write(f"{len(done)} runs finished more than {days:g} days ago")
