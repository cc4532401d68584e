"""Read-only queries the pages need beyond the platform's (``dashboard.queries``).

Everything is bounded so a run with 100k steps and 10k trajectories renders quickly:
lists are paginated, sparklines read ~40 sampled steps through the primary key, a
step's trajectories skip their token arrays, and only one trajectory's arrays are
ever decoded. Ownership is the caller's job (``services.visible_runs`` /
``get_run_for_user``); nothing here writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    When,
)
from django.db.models.functions import Cast
from django.utils import timezone

from dashboard.models import (
    ACTIVE_STATUSES,
    Alert,
    CriticalPath,
    Judgement,
    MetricPoint,
    Run,
    RunStatus,
    Trajectory,
)

SPARK_POINTS = 40
SORTS = {
    "new": ("-created_at",),
    "old": ("created_at",),
    "name": ("name", "-created_at"),
    "status": ("status", "-created_at"),
    "progress": (F("progress").desc(nulls_last=True), "-created_at"),
    "reward": (F("last_reward").desc(nulls_last=True), "-created_at"),
}


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _latest(run_ref: Any, key: str) -> Subquery:
    return Subquery(
        MetricPoint.objects.filter(run_id=run_ref, key=key)
        .order_by("-step")
        .values("value")[:1]
    )


def filter_runs(runs: QuerySet[Run], params: Any) -> QuerySet[Run]:
    """The runs list's filters and sort, from GET parameters."""
    q = (params.get("q") or "").strip()
    if q:
        runs = runs.filter(Q(name__icontains=q) | Q(owner__username__icontains=q))
    status = params.get("status") or ""
    if status == "active":
        runs = runs.filter(status__in=ACTIVE_STATUSES)
    elif status in RunStatus.values:
        runs = runs.filter(status=status)
    preset = params.get("algorithm") or ""
    if preset:
        runs = runs.filter(config__algorithm__preset=preset)
    env = params.get("env") or ""
    if env:
        runs = runs.filter(config__env__name=env)
    runs = runs.annotate(
        last_reward=_latest(OuterRef("pk"), "reward"),
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
    return runs.order_by(*SORTS.get(sort, SORTS["new"]))


def sample_steps(last_step: int, n: int = SPARK_POINTS) -> list[int]:
    """About ``n`` evenly spaced steps in ``1..last_step`` (always the last one)."""
    if last_step < 1:
        return []
    if last_step <= n:
        return list(range(1, last_step + 1))
    return sorted({1 + round(i * (last_step - 1) / (n - 1)) for i in range(n)})


def sparklines(runs: Sequence[Run], key: str = "reward") -> dict[Any, str]:
    """SVG ``points`` (viewBox 0 0 100 24) of ``key`` at sampled steps, per run.

    Reads ~40 rows per run through the primary key (run, step, key) instead of
    scanning the run's series.
    """
    cond = Q()
    for run in runs:
        steps = sample_steps(run.last_step)
        if steps:
            cond |= Q(run_id=run.pk, step__in=steps)
    if not cond:
        return {}
    series: dict[Any, list[tuple[int, float]]] = {}
    rows = MetricPoint.objects.filter(cond, key=key).values_list(
        "run_id", "step", "value"
    )
    for run_id, step, value in rows:
        if value is not None and math.isfinite(value):
            series.setdefault(run_id, []).append((step, value))
    return {run_id: spark_svg(sorted(points)) for run_id, points in series.items()}


def spark_svg(
    points: Sequence[tuple[int, float]], w: float = 100, h: float = 24
) -> str:
    if not points:
        return ""
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    dx = (x1 - x0) or 1
    dy = (y1 - y0) or 1
    return " ".join(
        f"{(x - x0) / dx * w:.1f},{h - 1 - (y - y0) / dy * (h - 2):.1f}"
        for x, y in points
    )


# --- one run -------------------------------------------------------------------------
@dataclass(frozen=True)
class RunStats:
    last_reward: float | None
    best_reward: float | None
    best_step: int | None
    alerts: int
    duration_s: float | None
    last_pass_at_k: float | None = None  # held-out evaluation (eval/pass@k)


def run_stats(run: Run) -> RunStats:
    rewards = MetricPoint.objects.filter(run=run, key="reward")
    last = rewards.order_by("-step").values_list("value", flat=True).first()
    best = (
        rewards.filter(value__isnull=False)
        .order_by("-value", "step")
        .values_list("value", "step")
        .first()
    )
    last_pass = (
        MetricPoint.objects.filter(run=run, key="eval/pass@k", value__isnull=False)
        .order_by("-step")
        .values_list("value", flat=True)
        .first()
    )
    return RunStats(
        last_pass_at_k=finite(last_pass),
        last_reward=finite(last),
        best_reward=finite(best[0]) if best else None,
        best_step=best[1] if best else None,
        alerts=Alert.objects.filter(run=run).count(),
        duration_s=duration_s(run),
    )


def duration_s(run: Run) -> float | None:
    if run.started_at is None:
        return None
    end = run.finished_at or timezone.now()
    return max(0.0, (end - run.started_at).total_seconds())


def alerts(run: Run, limit: int = 200) -> list[Alert]:
    return list(Alert.objects.filter(run=run).order_by("step", "detector")[:limit])


def trajectory_steps(run: Run) -> list[int]:
    """Steps that have stored trajectories, ascending."""
    return list(
        Trajectory.objects.filter(run=run)
        .order_by("step")
        .values_list("step", flat=True)
        .distinct()
    )


def nearest(steps: Sequence[int], step: int | None) -> int | None:
    """The stored step closest to ``step`` (the latest when None; ties go earlier)."""
    if not steps:
        return None
    if step is None:
        return steps[-1]
    return min(steps, key=lambda s: (abs(s - step), s))


def metric_keys(run: Run, limit: int = 500) -> list[str]:
    """Distinct metric keys of the run, by a loose index scan: one index seek per key
    on the (run, key, ...) index instead of a DISTINCT over millions of points."""
    table = MetricPoint._meta.db_table
    run_id = Run._meta.pk.get_db_prep_value(run.pk, connection)
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


# --- a step's trajectories --------------------------------------------------------------
@dataclass
class Group:
    group: int
    task_id: str
    dropped: bool
    rollouts: list[Trajectory]
    hidden: int = 0


def _num(params: Any, name: str) -> float | None:
    try:
        value = float(params.get(name, ""))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def step_groups(run: Run, step: int, params: Any) -> list[Group]:
    """The step's groups, each with its rollouts that pass the filters."""
    rows = (
        Trajectory.objects.filter(run=run, step=step)
        .defer("segments", "arrays", "facts", "agent_steps")
        .order_by("group", "index")
    )
    lo, hi = _num(params, "reward_min"), _num(params, "reward_max")
    len_lo, len_hi = _num(params, "length_min"), _num(params, "length_max")
    sign = params.get("sign") or ""
    dropped = params.get("dropped") or ""
    groups: dict[int, Group] = {}
    for t in rows:
        g = groups.setdefault(t.group, Group(t.group, t.task_id, t.dropped, []))
        g.dropped = g.dropped or t.dropped
        if _keep(t, lo, hi, len_lo, len_hi, sign, dropped):
            g.rollouts.append(t)
        else:
            g.hidden += 1
    return [g for g in groups.values() if g.rollouts]


def _keep(t: Trajectory, lo, hi, len_lo, len_hi, sign: str, dropped: str) -> bool:
    r, a = finite(t.reward), finite(t.advantage)
    if lo is not None and (r is None or r < lo):
        return False
    if hi is not None and (r is None or r > hi):
        return False
    if len_lo is not None and t.length < len_lo:
        return False
    if len_hi is not None and t.length > len_hi:
        return False
    if sign == "pos" and not (a is not None and a > 0):
        return False
    if sign == "neg" and not (a is not None and a < 0):
        return False
    if sign == "zero" and not (a is not None and a == 0):
        return False
    if dropped == "only" and not t.dropped:
        return False
    return not (dropped == "hide" and t.dropped)


def advantage_histogram(run: Run, step: int, bins: int = 20) -> dict[str, Any]:
    """Counts of the step's trajectory advantages in ``bins`` equal bins."""
    values = [
        v
        for v in Trajectory.objects.filter(
            run=run, step=step, dropped=False
        ).values_list("advantage", flat=True)
        if v is not None and math.isfinite(v)
    ]
    if not values:
        return {"step": step, "edges": [], "counts": []}
    lo, hi = min(values), max(values)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / width))] += 1
    return {
        "step": step,
        "edges": [lo + i * width for i in range(bins + 1)],
        "counts": counts,
    }


def judgements_for(run: Run, step: int, group: int, index: int) -> list[Judgement]:
    return list(
        Judgement.objects.filter(run=run, step=step, group=group, index=index).order_by(
            "judge"
        )
    )


def critical_path_for(
    run: Run, step: int, group: int, index: int
) -> CriticalPath | None:
    return CriticalPath.objects.filter(
        run=run, step=step, group=group, index=index
    ).first()


def critical_paths(run: Run, step: int, limit: int = 500) -> list[CriticalPath]:
    return list(
        CriticalPath.objects.filter(run=run, step=step).order_by("group", "index")[
            :limit
        ]
    )


def alert_counts(run_ids: Iterable[Any]) -> dict[Any, int]:
    rows = (
        Alert.objects.filter(run_id__in=list(run_ids))
        .values("run_id")
        .annotate(n=Count("pk"))
    )
    return {r["run_id"]: r["n"] for r in rows}


def best_rewards(run_ids: Iterable[Any]) -> dict[Any, float | None]:
    rows = (
        MetricPoint.objects.filter(
            run_id__in=list(run_ids), key="reward", value__isnull=False
        )
        .values("run_id")
        .annotate(best=Max("value"))
    )
    return {r["run_id"]: finite(r["best"]) for r in rows}


# --- compare --------------------------------------------------------------------------
def common_tasks(runs: Sequence[Run], limit: int = 50) -> list[str]:
    """Task ids every run has trajectories for, earliest first (same seed, same tasks)."""
    common: dict[str, int] | None = None
    for run in runs:
        firsts: dict[str, int] = {}
        rows = (
            Trajectory.objects.filter(run=run)
            .exclude(task_id="")
            .values_list("task_id", "step")
            .order_by("step")[:20000]
        )
        for task, step in rows:
            firsts.setdefault(task, step)
        if common is None:
            common = firsts
        else:
            common = {t: min(s, firsts[t]) for t, s in common.items() if t in firsts}
    return [
        t for t, _ in sorted((common or {}).items(), key=lambda kv: (kv[1], kv[0]))
    ][:limit]


@dataclass
class TaskColumn:
    run: Run
    step: int | None
    rollouts: list[Trajectory]
    best: Trajectory | None


def task_trajectories(
    runs: Sequence[Run], task: str, per_run: int = 16
) -> list[TaskColumn]:
    """Per run, the rollouts of ``task`` at the first step it was sampled."""
    columns = []
    for run in runs:
        first = (
            Trajectory.objects.filter(run=run, task_id=task)
            .order_by("step")
            .values_list("step", flat=True)
            .first()
        )
        rollouts = []
        if first is not None:
            rollouts = list(
                Trajectory.objects.filter(run=run, task_id=task, step=first)
                .defer("segments", "arrays", "facts", "agent_steps")
                .order_by("group", "index")[:per_run]
            )
        best = max(
            rollouts, key=lambda t: finite(t.reward) or float("-inf"), default=None
        )
        columns.append(TaskColumn(run, first, rollouts, best))
    return columns
