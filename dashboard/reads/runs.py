"""Runs: the runs list's filters and sort, a run's summary numbers, alerts, and the
run's JSON (one serialiser for the API and the pages)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Cast
from django.urls import reverse
from django.utils import timezone

from dashboard import jsonsafe
from dashboard.errors import InvalidConfig
from dashboard.library import roots
from dashboard.models import (
    UNFINISHED_STATUSES,
    Alert,
    Checkpoint,
    ExactFloatField,
    MetricPoint,
    Run,
    RunStatus,
    Trajectory,
)
from dashboard.reads.metrics import FINITE, NOT_FINITE, _latest, finite
from dashboard.reads.reward_names import latest_reward, reward_key

SORTS = {
    "new": ("-created_at",),
    "old": ("created_at",),
    "name": ("name", "-created_at"),
    "status": ("status", "-created_at"),
    "progress": (F("progress").desc(nulls_last=True), "-created_at"),
    # A latest reward that is not a number (NaN, which both databases order above
    # every number, or an infinity) after the numbers, before no reward at all.
    "reward": (
        "reward_unranked",
        F("last_reward").desc(nulls_last=True),
        "-created_at",
    ),
}


TEXT_FILTERS = ("q", "group", "algorithm", "env")


def check_filters(params: Any) -> None:
    """InvalidConfig naming each text filter no query can hold (NUL, surrogates),
    and a status or sort that is none of the known ones (a misspelt one listed every
    run, as if it were not there)."""
    errors = []
    for name in TEXT_FILTERS:
        problem = jsonsafe.text_problem(str(params.get(name) or ""))
        if problem:
            errors.append(f"{name}: {problem}")
    status = str(params.get("status") or "")
    if status and status != "active" and status not in RunStatus.values:
        known = ", ".join(["active", *RunStatus.values])
        errors.append(f"status: {status[:40]!r} is not one of {known}")
    sort = str(params.get("sort") or "")
    if sort and sort not in SORTS:
        errors.append(f"sort: {sort[:40]!r} is not one of {', '.join(SORTS)}")
    if errors:
        raise InvalidConfig(errors)


class Lower(Func):
    """``lower()`` that folds every letter: PostgreSQL's does; on SQLite (whose own
    folds ASCII only) the ``py_lower`` that ``dashboard.apps`` registers."""

    function = "LOWER"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, function="py_lower", **extra)


def filter_runs(runs: QuerySet[Run], params: Any) -> QuerySet[Run]:
    """The runs list's filters and sort, from GET parameters (InvalidConfig for a
    filter :func:`check_filters` refuses)."""
    check_filters(params)
    q = (params.get("q") or "").strip()
    if q:
        folded = q.lower()
        runs = runs.annotate(
            _name=Lower("name"), _owner=Lower("owner__username")
        ).filter(Q(_name__contains=folded) | Q(_owner__contains=folded))
    group = params.get("group") or ""
    if group:
        runs = runs.filter(group=group)
    status = params.get("status") or ""
    if status == "active":  # not ended: queued, running or paused
        runs = runs.filter(status__in=UNFINISHED_STATUSES)
    elif status in RunStatus.values:
        runs = runs.filter(status=status)
    preset = params.get("algorithm") or ""
    if preset:
        runs = runs.filter(config__algorithm__preset=preset)
    env = params.get("env") or ""
    if env:
        runs = runs.filter(config__env__name=env)
    runs = with_last_reward(runs).annotate(
        # An external run's config is any JSON: only ours is known to hold an int.
        progress=Case(
            When(
                external=False,
                then=Cast(F("last_step"), FloatField())
                / Cast(F("config__steps"), FloatField()),
            ),
            default=None,
            output_field=FloatField(),
        ),
    )
    sort = params.get("sort") or "new"
    if sort == "reward":
        runs = runs.annotate(
            reward_unranked=Case(
                When(last_reward__isnull=True, then=Value(2)),
                When(last_reward__in=NOT_FINITE, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            )
        )
    return runs.order_by(*SORTS.get(sort, SORTS["new"]))


def groups_of(runs: QuerySet[Run]) -> list[str]:
    """The run groups among ``runs`` (a trackio project is one), sorted."""
    names = runs.exclude(group="").order_by().values_list("group", flat=True)
    return sorted(set(names.distinct()))


# --- one run -------------------------------------------------------------------------
@dataclass(frozen=True)
class RunStats:
    last_reward: float | None
    best_reward: float | None
    best_step: int | None
    alerts: int
    duration_s: float | None
    last_pass_at_k: float | None = None  # held-out evaluation (eval/pass@k)


def run_stats(run: Run, reward: str | None = None) -> RunStats:
    """The run's summary numbers; its reward read from ``reward``, else from
    :func:`~dashboard.reads.reward_names.reward_key` (an external run's trainer may
    have logged it as ``train/reward``)."""
    rewards = MetricPoint.objects.filter(run=run, key=reward or reward_key(run))
    last = rewards.order_by("-step").values_list("value", flat=True).first()
    best = (
        rewards.filter(FINITE)
        .order_by("-value", "step")
        .values_list("value", "step")
        .first()
    )
    last_pass = (
        MetricPoint.objects.filter(FINITE, run=run, key="eval/pass@k")
        .order_by("-step")
        .values_list("value", flat=True)
        .first()
    )
    return RunStats(
        last_pass_at_k=finite(last_pass),
        # NaN / ±inf as logged: the pages say "NaN" (the runs list's latest does).
        last_reward=last,
        best_reward=finite(best[0]) if best else None,
        best_step=best[1] if best else None,
        alerts=Alert.objects.filter(run=run).count(),
        duration_s=duration_s(run),
    )


def duration_s(run: Run) -> float | None:
    """Wall time: the time one of our runs' attempts ran, each from its start to its
    end (the open one to the run's end, else to now), so time paused in the queue
    (a demo waiting behind a user's run) is not counted; a run without attempt
    records from its start to its end, else to now. An external run's to its last
    event, finished or not (no client of ours is running it, and trackio's has no
    finish call: a run whose client stopped would otherwise grow by the hour; a
    finish call made later is not training time)."""
    if run.started_at is None:
        return None
    end = (run.external and run.heartbeat_at) or run.finished_at or timezone.now()
    if not run.external:
        spans = [(a.started_at, a.ended_at) for a in run.attempts.all()]
        # Every attempt recorded (a run older than attempt records has fewer, the
        # one closed for it stamped at its end: start to end then).
        if spans and len(spans) >= run.attempt:
            return max(0.0, sum(((e or end) - s).total_seconds() for s, e in spans))
    return max(0.0, (end - run.started_at).total_seconds())


# An external run is "receiving" while its events come this recently. trackio's
# client sends every 0.5 s while logging and samples the system every 10 s; a run
# quieter than this shows "not sending" instead of "live" (run page, runs list, home).
# It stays ``running`` until ``EXTERNAL_RUN_TIMEOUT`` marks it ``lost``
# (``dashboard.runs.external.mark_lost``), so a trainer between slow steps is not
# ended by a page.
RECEIVING_WITHIN_S = 120


def quiet_window_s() -> float:
    """The seconds without an event after which a running external run is "not
    sending": :data:`RECEIVING_WITHIN_S`, or ``EXTERNAL_RUN_TIMEOUT`` when shorter.
    The one threshold: the server's pages read it here, and the run and home pages'
    timers get it in their page data."""
    from django.conf import settings

    return float(min(RECEIVING_WITHIN_S, settings.EXTERNAL_RUN_TIMEOUT))


def event_age_s(run: Run, now: Any = None) -> float | None:
    """Seconds since a running external run's last event; None for every other run
    (and one that has sent nothing yet)."""
    if not run.external or run.status != RunStatus.RUNNING or not run.heartbeat_at:
        return None
    return max(0.0, ((now or timezone.now()) - run.heartbeat_at).total_seconds())


def quiet_for_s(run: Run, now: Any = None) -> float | None:
    """Seconds since a running external run's last event, when longer than
    :func:`quiet_window_s`; None while it receives, and for every other run."""
    age = event_age_s(run, now)
    return age if age is not None and age > quiet_window_s() else None


def not_sending(now: Any = None) -> Q:
    """The runs :func:`quiet_for_s` counts as not sending, as a filter."""
    from datetime import timedelta

    cutoff = (now or timezone.now()) - timedelta(seconds=quiet_window_s())
    return Q(external=True, status=RunStatus.RUNNING, heartbeat_at__lt=cutoff)


def receiving(run: Run, now: Any = None) -> bool:
    """Is the run training (ours) or sending events now (external)?"""
    return run.status == RunStatus.RUNNING and quiet_for_s(run, now) is None


def alerts(run: Run, limit: int = 200) -> list[Alert]:
    return list(Alert.objects.filter(run=run).order_by("step", "detector")[:limit])


def alert_counts(run_ids: Iterable[Any]) -> dict[Any, int]:
    rows = (
        Alert.objects.filter(run_id__in=list(run_ids))
        .values("run_id")
        .annotate(n=Count("pk"))
    )
    return {r["run_id"]: r["n"] for r in rows}


def with_last_reward(runs: QuerySet[Run]) -> QuerySet[Run]:
    """``runs`` with ``last_reward``: each run's latest reward, in the query (an
    external run's under its trainer's name, :mod:`dashboard.reads.reward_names`)."""
    return runs.annotate(
        last_reward=Case(
            When(external=False, then=_latest(OuterRef("pk"), "reward")),
            default=latest_reward(OuterRef("pk")),
            output_field=ExactFloatField(),  # NaN compared as stored (SQLite: 'NaN')
        )
    )


def run_dict(run: Run, *, detail: bool = False) -> dict[str, Any]:
    """A run as the API returns it (``detail``: with its config). Paths as the form
    names them, relative to their root (no server path in an answer: a config sent
    back resolves them again, :func:`dashboard.library.roots.check_paths`)."""
    error = run.error if run.external else roots.shown_text(run.error, run.config)
    out = {
        "id": run.id,
        "name": run.name,
        "owner": run.owner.get_username(),
        "status": run.status,
        "queue": run.queue,
        "attempt": run.attempt,
        "last_step": run.last_step,
        "frame_seq": run.frame_seq,
        "cancel_requested": run.cancel_requested,
        "pause_requested": run.pause_requested,
        "error": error,
        "external": run.external,
        "framework": run.framework,
        "group": run.group,
        "parent": run.parent_id,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "duration_s": duration_s(run),
        "heartbeat_at": run.heartbeat_at,
        "demo": run.demo,
        "warmup": run.warmup or {},
    }
    if hasattr(run, "last_reward"):  # the list's (with_last_reward)
        out["last_reward"] = jsonsafe.num(run.last_reward)
    if detail:
        out["config"] = roots.shown_config(run)
    return out


def alert_dict(a: Alert) -> dict[str, Any]:
    """An alert as stored; ``trajectories``: those of its step that made it fire
    (``{"group", "index", "task_id", "why"}``)."""
    return {
        "step": a.step,
        "detector": a.detector,
        "severity": a.severity,
        "message": a.message,
        "evidence": a.evidence,
        "trajectories": [dict(t) for t in a.trajectories or []],
    }


def alert_dicts(run: Run, alerts: list[Alert]) -> list[dict[str, Any]]:
    """:func:`alert_dict` of each, every evidence trajectory with ``stored`` (is it
    in the database: pruned or never recorded ones are not) and ``url``, its
    trajectory page (None when not stored). One query for all of them."""
    wanted: dict[int, set[int]] = {}
    for a in alerts:
        for t in a.trajectories or []:
            wanted.setdefault(a.step, set()).add(t.get("group"))
    stored: set[tuple[int, int, int]] = set()
    if wanted:
        where = Q()
        for step, groups in wanted.items():
            where |= Q(step=step, group__in=sorted(g for g in groups if g is not None))
        stored = set(
            Trajectory.objects.filter(where, run=run).values_list(
                "step", "group", "index"
            )
        )
    out = []
    for a in alerts:
        d = alert_dict(a)
        for t in d["trajectories"]:
            key = (a.step, t.get("group"), t.get("index"))
            t["stored"] = key in stored
            t["url"] = (
                reverse("pages:trajectory", args=[run.pk, *key])
                if t["stored"]
                else None
            )
        out.append(d)
    return out


def checkpoint_dict(c: Checkpoint, kept: bool) -> dict[str, Any]:
    """A recorded checkpoint, and whether it is still ``kept`` on disk: the trainer
    keeps the newest ``checkpoint.keep`` and deletes older ones, whose rows stay (a
    checkpoint was written at that step)."""
    return {
        "step": c.step,
        "attempt": c.attempt,
        "created_at": c.created_at.isoformat(),
        "kept": kept,
    }
