"""What a run leaves behind: the run row, and the narrow tables the trainer's events land in.

Every event table carries the run and the training step, with a unique key per
(run, step, ...) so writes are idempotent (the first write of a key wins): a run
resumed from a checkpoint first deletes the later steps of the attempt that died,
then writes them again.

Storage choices (documented here, decoded by ``dashboard.ingest.arrays``/``dashboard.reads``):

* ``MetricPoint`` is narrow (run, key, step, value) with one index: the composite
  primary key (run, key, step), covering ``value`` on PostgreSQL.
  Every float column that holds a number from an event is an :class:`ExactFloatField`:
  NaN and +/-Infinity round-trip on both backends (PostgreSQL stores them natively;
  on SQLite, which would store a bound NaN as NULL, NaN is kept as the text ``'NaN'``).
  NULL means "no value" only. The JSON API writes non-finite numbers as the strings
  ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
* ``Trajectory.arrays`` packs the per-token arrays of every segment as little-endian
  ``int32`` token ids followed by ``float32`` logprob, old_logprob, ratio, entropy and
  advantage (24 bytes a token); ``segments`` keeps the rest (kind, text, tokens...).
  The leading segments a group's rollouts share (the prompt) are stored once, in
  ``GroupPrompt``, and each trajectory refers to it (``shared_prompt``).
* JSON columns never hold NaN/inf (encoded as the strings above) nor NUL characters.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from django.conf import settings
from django.db import connection, models

# The site's own tables beside runs, kept in their module and importable from here.
from dashboard.site_models import (  # noqa: F401
    AccountSettings,
    ApiToken,
    Dataset,
    JudgeEndpoint,
    WebhookDelivery,
    Worker,
)


class ExactFloatField(models.FloatField):
    """A double precision column that keeps NaN on every backend.

    SQLite has no NaN: the sqlite3 module binds ``float("nan")`` as NULL, so the
    embedded default would lose it (and confuse it with "no value"). Here NaN travels
    to SQLite as the text ``'NaN'``, which a REAL column keeps as TEXT (it is not a
    numeric literal) and which SQLite orders above every number, as PostgreSQL
    orders NaN; ``= 'NaN'`` finds it on both. Infinities are REAL values on SQLite
    already. The column type is that of ``FloatField``."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False):
        value = super().get_db_prep_value(value, connection, prepared)
        if (
            isinstance(value, float)
            and math.isnan(value)
            and connection.vendor == "sqlite"
        ):
            return "NaN"
        return value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return float(value) if isinstance(value, str) else value


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNRESPONSIVE = "unresponsive"
    # An external run that sent nothing for EXTERNAL_RUN_TIMEOUT; its next event
    # brings it back to running.
    LOST = "lost"
    # Paused by its owner (Pause on its page): stopped at a step with its state kept,
    # out of the queue until Resume queues it again (``services.do_resume_run``).
    PAUSED = "paused"


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
# Not ended: listed with the active runs, never pruned, cancellable.
UNFINISHED_STATUSES = (*ACTIVE_STATUSES, RunStatus.PAUSED)
FINAL_STATUSES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.UNRESPONSIVE,
)


class Run(models.Model):
    """One training run. ``config`` is a validated ``TrainConfig`` dump.

    The lease: a worker owns the run while ``lease`` matches the token it claimed and
    ``heartbeat_at`` is fresh; ``attempt`` counts claims (the reaper requeues a run
    whose heartbeat stopped, up to ``RUN_MAX_ATTEMPTS``). ``frame_seq`` numbers the
    frames streamed to browsers, across attempts.

    An *external* run (``external``) is trained elsewhere (our trainer on another
    machine, TRL, verl, an import) and reports its events over the HTTP API; it has no
    lease or queue, ``framework`` says what produced it, and ``heartbeat_at`` is the
    time of its last event. ``external_id`` is the id its tracker gives it (trackio's
    ``run_id``), unique per owner; ``group`` gathers related runs (a trackio project).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs"
    )
    config = models.JSONField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )
    status = models.CharField(
        max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED
    )
    queue = models.CharField(max_length=64, default="gpu")
    attempt = models.PositiveIntegerField(default=0)
    lease = models.UUIDField(null=True, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)  # last task message sent
    cancel_requested = models.BooleanField(default=False)
    # Pause asked while running: the trainer stops at its next step keeping its
    # state, and the run waits ``paused`` (``lease.hold``).
    pause_requested = models.BooleanField(default=False)
    last_step = models.IntegerField(default=0)
    frame_seq = models.BigIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    external = models.BooleanField(default=False)
    framework = models.CharField(max_length=64, blank=True, default="")
    external_id = models.CharField(max_length=64, blank=True, default="")
    group = models.CharField(max_length=200, blank=True, default="")
    # What ``manage.py prune_runs`` removed: {"at", "older_than_days", "arrays",
    # "trajectories", "rows"}; empty: nothing was ever pruned.
    pruned = models.JSONField(default=dict, blank=True)
    # A demo run (``bootstrap_demo``): the embedded executor runs a user's own runs
    # first and pauses a demo in progress for them (``dashboard.runs.inprocess``).
    demo = models.BooleanField(default=False)
    # The last warm-start progress event: {"step", "of", "loss"}; empty: none yet.
    warmup = models.JSONField(default=dict, blank=True)
    # A clone launched to repair a hack of its parent (the repair loop):
    # {"detector", "alert_step", "weights": {component: weight}}; empty: none.
    repair = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="run_owner_created"),
            models.Index(
                fields=["status", "heartbeat_at"], name="run_status_heartbeat"
            ),
            models.Index(fields=["owner", "group"], name="run_owner_group"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "external_id"],
                condition=~models.Q(external_id=""),
                name="run_external_id_uniq",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


class EntryReceipt(models.Model):
    """An entry of a tracker's batch already stored (trackio's ``log_id`` or
    ``alert_id``): the same entry sent again is a duplicate, whatever step it would
    land on now."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="receipts")
    key = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "key"], name="receipt_uniq")
        ]


class RunAttempt(models.Model):
    """One claim of a run by an executor, and how it ended.

    ``message`` is one line for the run's owner; ``detail`` (a traceback) is for the
    log and the admin only: it names server files. ``outcome`` is empty while the
    attempt runs, then the status it ended with (``unresponsive``: the heartbeat
    stopped and the reaper took the run back).
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, blank=True, default="")
    message = models.CharField(max_length=500, blank=True, default="")
    detail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="attempt_uniq")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} ({self.outcome or 'running'})"


class MetricPoint(models.Model):
    """One scalar of one step: the narrow table charts and comparisons read.

    Its only index is the primary key (run, key, step), which on PostgreSQL also
    INCLUDEs ``value`` (migration 0002): upserts maintain one index, and a chart's
    per-key step range is an index-only scan. Readers that want every key of a step
    range list the run's keys first (a loose index scan, :func:`metric_keys` below).
    """

    pk = models.CompositePrimaryKey("run_id", "key", "step")
    # No database-level foreign key: its per-row deferred check doubled the cost of
    # every batch. Deleting a run still deletes its points (Django's cascade).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, db_index=False, db_constraint=False
    )
    key = models.CharField(max_length=200)
    step = models.IntegerField()
    # NULL only in rows SQLite stored before 0014 (then meaning NaN; 0014 rewrites them)
    value = ExactFloatField(null=True)


# Rollup levels: buckets of 2**4 = 16, 2**6 = 64 and 2**8 = 256 consecutive steps
# (bucket = step >> shift). A chart reads the coarsest level that still has at least
# one row per point it asks for: between 1 and 4 rows per point.
ROLLUP_SHIFTS = (4, 6, 8)


def metric_keys(run: Any, limit: int = 10_000) -> list[str]:
    """Distinct metric keys of the run (a Run or its id), by a loose index scan: one index seek per key
    on the (run, key, ...) index instead of a DISTINCT over millions of points."""
    table = MetricPoint._meta.db_table
    run_id = Run._meta.pk.get_db_prep_value(getattr(run, "pk", run), connection)
    sql = (
        f"WITH RECURSIVE k(key, n) AS ("
        f" SELECT MIN(key), 1 FROM {table} WHERE run_id = %s"
        f" UNION ALL"
        f" SELECT (SELECT MIN(key) FROM {table} WHERE run_id = %s AND key > k.key), n + 1"
        f" FROM k WHERE k.key IS NOT NULL AND n < %s"
        f") SELECT key FROM k WHERE key IS NOT NULL"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [run_id, run_id, limit])
        return [row[0] for row in cur.fetchall()]


class MetricRollup(models.Model):
    """Per key, per level and per bucket of ``2**shift`` steps: min, max and last value
    with their steps.

    Kept in step with ``MetricPoint`` by the ingest path (merged with
    LEAST/GREATEST semantics as points arrive, rebuilt where a resumed attempt
    supersedes rows), so a chart of 1,000 points over 100k steps reads ~1.6k rows per
    key (the 64-step level) instead of 100k points. On SQLite (the embedded default)
    the same rows are folded in Python as points arrive (``dashboard.ingest.rollups.fold``).
    """

    pk = models.CompositePrimaryKey("run_id", "key", "shift", "bucket")
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, db_index=False, db_constraint=False
    )
    key = models.CharField(max_length=200)
    shift = models.SmallIntegerField()
    bucket = models.IntegerField()
    vmin = ExactFloatField(null=True)
    smin = models.IntegerField()
    vmax = ExactFloatField(null=True)
    smax = models.IntegerField()
    vlast = ExactFloatField(null=True)
    slast = models.IntegerField()


class _StepRow(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_index=False)
    step = models.IntegerField()

    class Meta:
        abstract = True


class Trajectory(_StepRow):
    group = models.IntegerField()
    index = models.IntegerField()
    task_id = models.CharField(max_length=200, blank=True, default="")
    dropped = models.BooleanField(default=False)
    reward = ExactFloatField(null=True)  # NULL: none given
    advantage = ExactFloatField(null=True)  # NULL: none given
    num_turns = models.IntegerField(default=0)
    length = models.IntegerField(default=0)
    truncated = models.BooleanField(default=False)
    rewards = models.JSONField(default=dict)  # {"total", "components", "per_step"}
    facts = models.JSONField(default=dict)
    agent_steps = models.JSONField(
        default=list
    )  # per agent step: action, tool, ok, observation...
    segments = models.JSONField(
        default=list
    )  # per segment: turn, kind, text, tokens, mask, n
    arrays = models.BinaryField(default=b"")  # see module docstring
    # The leading segments are the group's shared prompt (GroupPrompt): ``segments``
    # and ``arrays`` hold only what follows it.
    shared_prompt = models.BooleanField(default=False)
    # What the server cut to its limits on the way in (dashboard.ingest.bounds), one
    # note per field: empty for a trajectory stored as sent.
    clipped = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "group", "index"], name="traj_unique"
            ),
        ]
        # A task's history (dashboard.reads.history) without reading the whole run.
        indexes = [models.Index(fields=["run", "task_id", "step"], name="traj_task")]


class GroupPrompt(_StepRow):
    """The leading segments identical across a group's rollouts (the prompt), stored
    once per (run, step, group) instead of once per rollout (``dashboard.ingest.prompts``)."""

    group = models.IntegerField()
    segments = models.JSONField(default=list)  # as Trajectory.segments
    arrays = models.BinaryField(default=b"")  # as Trajectory.arrays

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "group"], name="group_prompt_unique"
            ),
        ]


class Judgement(_StepRow):
    group = models.IntegerField()
    index = models.IntegerField()
    judge = models.CharField(max_length=64)
    backend = models.CharField(max_length=32, blank=True, default="")
    ok = models.BooleanField(default=True)
    score = ExactFloatField(null=True)  # NULL: none given
    scores = models.JSONField(default=dict)
    rationale = models.TextField(blank=True, default="")
    raw = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    target_step = models.IntegerField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "group", "index", "judge"],
                name="judgement_unique",
            ),
        ]


class CriticalPath(_StepRow):
    group = models.IntegerField()
    index = models.IntegerField()
    stages = models.JSONField(default=list)
    critical_steps = models.IntegerField(default=0)
    total_steps = models.IntegerField(default=0)
    path = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "group", "index"], name="critical_path_unique"
            ),
        ]


class Alert(_StepRow):
    detector = models.CharField(max_length=64)
    severity = models.CharField(max_length=16, default="warning")
    message = models.TextField(blank=True, default="")
    evidence = models.JSONField(default=dict)
    # The trajectories of this step that made it fire: [{"group", "index",
    # "task_id", "why"}] (``rewards.evidence``); empty for older alerts.
    trajectories = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "detector"], name="alert_unique"
            ),
        ]


class Checkpoint(_StepRow):
    path = models.CharField(max_length=1024)
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="checkpoint_unique"),
        ]
