"""Retention: what is stored of a run, and pruning old runs on request.

:func:`prune` (``manage.py prune_runs``) drops the per-token arrays, and if asked the
whole trajectories, of runs finished more than N days ago. Metrics, rollups, alerts,
judgements, critical paths and checkpoints stay, and so does what a run says about
itself (config, status, summaries). With ``keep_recorded`` the groups a reader looks
at first stay whole: per step the best and the worst group by mean reward and every
group an alert points at (``trainer.recording_policy.alerted_groups``). What was pruned is
written on the run (``Run.pruned``) and the run page says it. Nothing here runs unless
called.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Avg
from django.utils import timezone

from dashboard.models import ACTIVE_STATUSES, Alert, GroupPrompt, Run, Trajectory
from trainer.recording_policy import DEFAULT, alerted_groups, describe, policy_from


@dataclass
class Pruned:
    run_id: Any
    name: str
    arrays: int  # trajectories (and group prompts) whose arrays were dropped
    trajectories: int  # trajectories deleted


def prune(
    older_than_days: float,
    *,
    trajectories: bool = False,
    keep_recorded: bool = False,
    dry_run: bool = False,
    now: Any = None,
) -> list[Pruned]:
    """Prune every run finished before ``now - older_than_days``; returns per run
    what was (or, ``dry_run``, would be) pruned."""
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    runs = Run.objects.filter(finished_at__lt=cutoff).exclude(
        status__in=ACTIVE_STATUSES
    )
    out = []
    for run in runs.order_by("finished_at"):
        with transaction.atomic():
            done = _prune_run(run, trajectories, keep_recorded, dry_run)
            if not dry_run and (done.arrays or done.trajectories):
                _note(run, done, older_than_days, trajectories, keep_recorded)
        out.append(done)
    return out


def _kept(run: Run) -> dict[int, set[int]]:
    """Per step, the groups ``keep_recorded`` keeps: best, worst, alerted."""
    means: dict[int, list[tuple[float, int]]] = defaultdict(list)
    rows = (
        Trajectory.objects.filter(run=run, reward__isnull=False)
        .values("step", "group")
        .annotate(m=Avg("reward"))
        .values_list("step", "group", "m")
    )
    for step, group, m in rows:
        means[step].append((m, group))
    keep: dict[int, set[int]] = defaultdict(set)
    for step, pairs in means.items():
        pairs.sort()
        keep[step].update({pairs[0][1], pairs[-1][1]})
    for step, evidence in Alert.objects.filter(run=run).values_list("step", "evidence"):
        keep[step].update(alerted_groups([evidence]))
    return keep


def _prune_run(
    run: Run, trajectories: bool, keep_recorded: bool, dry_run: bool
) -> Pruned:
    keep = _kept(run) if keep_recorded else None
    done = Pruned(run.pk, run.name, 0, 0)
    for model in (Trajectory, GroupPrompt):
        n = 0
        for rows in _chunks(run, model, keep):
            if not trajectories:
                rows = rows.exclude(arrays=b"")
            count = rows.count()
            n += count
            if dry_run or not count:
                continue
            if trajectories:
                rows.delete()
            else:
                rows.update(arrays=b"")
        if trajectories:
            done.trajectories += n if model is Trajectory else 0
        else:
            done.arrays += n
    return done


def _chunks(run: Run, model: type, keep: dict[int, set[int]] | None):
    """The rows to prune: all the run's, or (``keep``) those outside the kept groups,
    by ids in chunks (a bound on a statement's parameters)."""
    if keep is None:
        yield model.objects.filter(run=run)
        return
    rows = model.objects.filter(run=run).values_list("pk", "step", "group")
    ids = [pk for pk, step, group in rows.iterator() if group not in keep.get(step, ())]
    for i in range(0, len(ids), 500):
        yield model.objects.filter(pk__in=ids[i : i + 500])


def _note(
    run: Run, done: Pruned, days: float, trajectories: bool, keep_recorded: bool
) -> None:
    old = run.pruned if isinstance(run.pruned, dict) else {}
    run.pruned = {
        "at": timezone.now().isoformat(),
        "older_than_days": days,
        "arrays": True,
        "trajectories": trajectories or bool(old.get("trajectories")),
        "kept": "best, worst and alerted groups" if keep_recorded else "",
        "arrays_dropped": int(old.get("arrays_dropped", 0)) + done.arrays,
        "trajectories_deleted": int(old.get("trajectories_deleted", 0))
        + done.trajectories,
    }
    Run.objects.filter(pk=run.pk).update(pruned=run.pruned)


def pruned_line(run: Run) -> str:
    """What the run page says is gone ("" when nothing was pruned)."""
    p = run.pruned if isinstance(run.pruned, dict) else {}
    if not p:
        return ""
    gone = []
    if p.get("trajectories_deleted"):
        gone.append(f"{_trajectories(p['trajectories_deleted'])} deleted")
    if p.get("arrays_dropped"):
        gone.append(f"per-token arrays of {_trajectories(p['arrays_dropped'])} dropped")
    kept = f"; kept whole: {p['kept']}" if p.get("kept") else ""
    when = str(p.get("at", ""))[:10]
    return (
        f"Pruned on {when}: {', '.join(gone) or 'nothing'}{kept}. "
        "Metrics, alerts and judgements are kept."
    )


def _trajectories(n: Any) -> str:
    return f"{n} trajector{'y' if n == 1 else 'ies'}"


def recording_line(run: Run) -> str:
    """What the run page says was recorded, from the run's ``record`` config."""
    config = run.config if isinstance(run.config, dict) else {}
    try:
        policy = policy_from(config.get("record"))
    except ValueError:
        policy = DEFAULT
    rollout = config.get("rollout") if isinstance(config.get("rollout"), dict) else {}
    per_step = None
    tasks, size = rollout.get("tasks_per_step"), rollout.get("group_size")
    if isinstance(tasks, int) and isinstance(size, int):
        per_step = tasks * size
    return "Recorded: " + describe(policy, per_step)
