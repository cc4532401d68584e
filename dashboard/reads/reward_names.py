"""Which stored metric is a run's reward: ``reward`` for ours, and for a run reported
over HTTP, the name its trainer logged it under.

Our trainer and the importers store the step's mean reward as ``reward`` (the
importers map their trainers' names through :mod:`trainer.metric_names`). A run
reported live keeps the names its client sent: trackio's and W&B's reporting from
transformers' Trainer (TRL's ``GRPOTrainer`` among them, ``_metrics[mode]["reward"]``
in TRL 1.16) prefixes them ``train/``, so a generic trackio run holds
``train/reward`` and no ``reward``; others log ``rewards/mean``-like names. The pages
read such a run's reward from the first of :func:`reward_names` it logged, at read
time: what is stored stays as the trainer named it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import Exists, OuterRef, Subquery
from django.db.models.functions import Coalesce

from dashboard.models import MetricPoint, Run

REWARD = "reward"
# Names of a step's mean reward no trainer table holds: generic loggers' spellings.
GENERIC = ("rewards/mean", "reward/mean", "reward_mean", "mean_reward")
# transformers' Trainer reports every logged name under this prefix (trackio, W&B).
TRAINER_PREFIX = "train/"


def reward_names() -> list[str]:
    """The names a step's mean reward is logged under, the most telling first: ours,
    TRL's as transformers reports it, every framework's of
    :data:`trainer.metric_names.NAMES` that maps to ours (read at each call, so
    :func:`~trainer.metric_names.register_names` counts), then generic ones with and
    without the ``train/`` prefix. A component's ``rewards/<name>/mean`` is not one."""
    from trainer import metric_names

    names = [REWARD, TRAINER_PREFIX + REWARD]
    for table in metric_names.NAMES.values():
        names += [theirs for theirs, ours in table.items() if ours == REWARD]
    for name in GENERIC:
        names += [name, TRAINER_PREFIX + name]
    return list(dict.fromkeys(names))


def reward_keys(runs: Sequence[Run]) -> dict[Any, str]:
    """Per run (by pk), the stored key of its reward series: ``reward`` for ours and
    for an external run that logged it (or logged none of the names); else the first
    of :func:`reward_names` the run logged. One query for the external runs, an index
    probe per name and run."""
    out = {run.pk: REWARD for run in runs}
    external = [run.pk for run in runs if run.external]
    if not external:
        return out
    names = reward_names()
    probes = {
        f"has_{i}": Exists(MetricPoint.objects.filter(run_id=OuterRef("pk"), key=name))
        for i, name in enumerate(names)
    }
    rows = Run.objects.filter(pk__in=external).annotate(**probes).values("pk", *probes)
    for row in rows:
        found = next((n for i, n in enumerate(names) if row[f"has_{i}"]), REWARD)
        out[row["pk"]] = found
    return out


def reward_key(run: Run) -> str:
    """:func:`reward_keys` of one run."""
    return reward_keys([run])[run.pk]


def _latest(run_ref: Any, key: str) -> Subquery:
    return Subquery(
        MetricPoint.objects.filter(run_id=run_ref, key=key)
        .order_by("-step")
        .values("value")[:1]
    )


def latest_reward(run_ref: Any, names: Iterable[str] | None = None) -> Coalesce:
    """The last value of the first of ``names`` (:func:`reward_names`) the run logged,
    as an annotation: the runs list's "latest reward" of an external run."""
    latest = [_latest(run_ref, name) for name in names or reward_names()]
    return Coalesce(*latest)
