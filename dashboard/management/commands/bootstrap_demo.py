"""``manage.py bootstrap_demo``: the embedded default's first-run setup.

Creates the ``demo`` user (password generated once, kept in ``var/demo_password`` and
printed every time) and launches the demo runs that user has not run yet (by name):
the calc learning demo (tens of minutes on 2 cores), then a long swarm demo, so that a
newcomer who logs in later still finds a run training live. Runs execute one at a
time in the embedded mode: the swarm demo starts when the calc demo ends. Both are
marked ``demo``: a run the user launches goes before them, and a demo in progress
pauses for it (``dashboard.runs.inprocess``). Refuses to run outside the embedded
mode unless ``--force``.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from dashboard.models import Run
from dashboard.runs import services

# The calc learning demo (bench/configs/calc.yaml), shortened: the default model learns
# to call the calculator with "+" and to answer with its result; the reward climbs from
# about 0.2 towards 0.5. On 2 quiet cores its warm start takes ~25 s and its 200 steps
# end ~96 s after `make run`; a busy machine slows it several times (README, Quick start).
DEMO_CONFIG = {
    "name": "demo: calc, GRPO",
    "seed": 0,
    "steps": 200,
    "env": {"name": "calc", "params": {"ops": ["add"]}},
    "model": {"size": "tiny", "device": "cpu", "warmstart_steps": 300},
    "rollout": {
        "tasks_per_step": 8,
        "group_size": 8,
        "max_turns": 3,
        "max_action_tokens": 10,
    },
    "algorithm": {"preset": "grpo"},
    "optim": {"lr": 0.0003},
    "checkpoint": {"every": 20},
    "reward": {
        "components": [
            {"name": "outcome", "weight": 1.0, "params": {"partial_credit": True}},
            {"name": "format", "weight": 0.1},
        ]
    },
}


# Something to watch live for a while (half an hour or more on 2 quiet cores): the swarm
# (PARL) environment, where the orchestrator learns to fan subtasks out to sub-agents,
# with critical paths to look at on the way. Paid by r_perf (success, discounted by
# critical steps) and format alone, as bench/configs/swarm.yaml: with the default swarm
# reward's r_parallel and r_finish (0.3 each, annealed to 0 by step 100) the tiny model
# learned those and its success fell to 0 (0.10 over steps 1-25, 0.000 over 151-250)
# while its reward fell 0.43 -> 0.12. Measured on one thread, 250 RL steps from the same
# warm start: success 0.11 -> 0.20 (steps 76-150) -> 0.68 (151-250), parallelism 1.5 ->
# 3.8 sub-agents; seed 1: 0.11 -> 0.38 -> 0.75.
LIVE_DEMO_CONFIG = {
    "name": "demo: swarm, live for a while",
    "seed": 0,
    "steps": 1500,
    "env": {"name": "swarm"},
    "model": {"size": "tiny", "device": "cpu", "warmstart_steps": 300},
    "rollout": {
        "tasks_per_step": 4,
        "group_size": 8,
        "max_turns": 6,
        "max_action_tokens": 10,
    },
    "algorithm": {"preset": "grpo"},
    "optim": {"lr": 0.0003},
    "checkpoint": {"every": 50},
    "reward": {
        "components": [
            {
                "name": "r_perf",
                "weight": 1.0,
                "params": {"budget": 40, "discount": 0.5},
            },
            {"name": "format", "weight": 0.05},
        ]
    },
}
DEMOS = (DEMO_CONFIG, LIVE_DEMO_CONFIG)


class Command(BaseCommand):
    help = "Create the demo user and launch a tiny demo run (embedded mode)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--force", action="store_true", help="Allow outside the embedded mode."
        )
        parser.add_argument("--username", default="demo")

    def handle(self, *args, force: bool, username: str, **options):
        if not settings.EMBEDDED and not force:
            raise CommandError(
                "bootstrap_demo is for the embedded default (no DATABASE_URL/REDIS_URL)"
            )
        password = self._password()
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User.objects.create_user(username, password=password)
        elif not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        runs = []
        for config in DEMOS:
            run = (
                Run.objects.filter(owner=user, name=config["name"])
                .order_by("created_at")
                .first()
            )
            runs.append(run or services.launch_run(user, config, demo=True))
        self.stdout.write(f"demo login: username={username} password={password}")
        for run in runs:
            self.stdout.write(
                f"demo run: {run.id} ({run.status}) {run.name!r} at /runs/{run.id}/"
            )

    def _password(self) -> str:
        path = settings.VAR_DIR / "demo_password"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(12))
            path.chmod(0o600)
        return path.read_text().strip()
