"""The repair loop's reads: the weight an alert suggests, and on a repair clone's page
the comparison with its parent (did the hack's statistic stay on the healthy side?).

The knowledge is :mod:`rewards.repair` (which weight, which statistics, which side of
which threshold); this module reads the runs' reward configs, their stored per-step
metrics and alerts. The thresholds are the parent's (the detector configuration that
fired), so both runs are held to the same line.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dashboard.models import Alert, MetricPoint, Run
from dashboard.reads.evidence import by_reason, evidence_rows
from rewards.config import DetectorConfig
from rewards.repair import Component, Watched, addable, suggest, thresholds

MAX_POINTS = 1000  # per run and statistic on the chart (the verdict reads every step)
MAX_STEPS = 200_000  # steps read per run and key


def _setup(run: Run) -> tuple[str, Any] | None:
    """(environment, reward config) of one of our runs; None for another trainer's."""
    from pydantic import ValidationError

    from trainer.config import TrainConfig
    from trainer.runner import reward_config_for

    if run.external:
        return None
    try:
        cfg = TrainConfig.model_validate(run.config)
        return cfg.env.name, reward_config_for(cfg)
    except (ValidationError, ValueError, TypeError):
        return None


def suggestions(run: Run, detectors: list[str]) -> dict[str, dict[str, Any]]:
    """Per detector that fired on ``run``, the weight that removes its incentive
    (:func:`rewards.repair.suggest`); none for an external run or a detector with no
    fix."""
    setup = _setup(run)
    if setup is None:
        return {}
    env, rcfg = setup
    comps = [Component(c.key, c.name, c.weight) for c in rcfg.components]
    can_add = addable(env, [c.name for c in rcfg.components])
    out = {}
    for kind in dict.fromkeys(detectors):
        s = suggest(kind, comps, can_add)
        if s is not None:
            out[kind] = s.as_dict()
    return out


def detector_config(run: Run) -> DetectorConfig:
    setup = _setup(run)
    return setup[1].detectors if setup is not None else DetectorConfig()


def comparison(run: Run) -> dict[str, Any] | None:
    """For a repair clone (``Run.repair``), the detector's statistics in its parent
    and in it, step by step, against the thresholds; None for any other run."""
    repair = run.repair if isinstance(run.repair, dict) else {}
    detector = repair.get("detector")
    if not detector or run.parent_id is None:
        return None
    parent = run.parent
    cfg = detector_config(parent)
    runs = {"parent": parent, "clone": run}
    # The statistics of the alert the clone repairs (its step's, else the first's).
    fired = Alert.objects.filter(run=parent, detector=detector)
    step = repair.get("alert_step")
    evidence = (
        fired.filter(step=step).values_list("evidence", flat=True).first()
        if isinstance(step, int)
        else None
    ) or fired.order_by("step").values_list("evidence", flat=True).first()
    stats, hacked_at = [], {role: None for role in runs}
    evidence = evidence if isinstance(evidence, dict) else None
    for watched, threshold in thresholds(detector, cfg, evidence):
        entry = {
            "metric": watched.metric,
            "per": watched.per,
            "label": watched.label,
            "threshold": threshold,
            "threshold_name": watched.threshold,
            "side": watched.side,
            "floor": watched.floor_value,
            "floor_name": watched.floor,
        }
        for role, r in runs.items():
            series = _series(r, watched)
            entry[role] = _verdict(series, watched, threshold, cfg.window)
            hacked = {s for s, v in series if watched.hacked(v, threshold)}
            hacked_at[role] = (
                hacked if hacked_at[role] is None else hacked_at[role] & hacked
            )
        stats.append(entry)
    # The hack's zone: every statistic on its side at once (spurious parallelism is
    # many sub-agents *and* few subtasks finished).
    zone = {role: sorted(h or ()) for role, h in hacked_at.items()}
    alerts = {
        role: [
            {"step": step, "message": message}
            for step, message in Alert.objects.filter(run=r, detector=detector)
            .order_by("step")
            .values_list("step", "message")[:50]
        ]
        for role, r in runs.items()
    }
    return {
        "detector": detector,
        "alert_step": repair.get("alert_step"),
        "weights": repair.get("weights") or {},
        "parent": {"id": str(parent.pk), "name": parent.name},
        "clone": {"id": str(run.pk), "name": run.name, "status": run.status},
        "window": cfg.window,
        "stats": stats,
        "alerts": alerts,
        "zone": {
            role: {"steps": len(z), "first": z[0] if z else None}
            for role, z in zone.items()
        },
        "verdict": _headline(stats, alerts, zone["clone"], run),
    }


def _series(run: Run, watched: Watched) -> list[tuple[int, float]]:
    """(step, statistic) of every step the run logged it at."""
    keys = [watched.metric] + ([watched.per] if watched.per else [])
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    rows = (
        MetricPoint.objects.filter(run=run, key__in=keys)
        .order_by("step")
        .values_list("step", "key", "value")[: MAX_STEPS * len(keys)]
    )
    for step, key, value in rows:
        if value is not None and value == value and abs(value) != float("inf"):
            by_step[step][key] = value
    out = []
    for step in sorted(by_step):
        v = watched.value(by_step[step])
        if v is not None:
            out.append((step, v))
    return out


def _verdict(
    series: list[tuple[int, float]], watched: Watched, threshold: float, window: int
) -> dict[str, Any]:
    """The chart's points and what they say: steps on the hack's side, the first of
    them, and the mean of the last ``window`` steps against the threshold."""
    hacked = [s for s, v in series if watched.hacked(v, threshold)]
    late = [v for _, v in series[-window:]]
    late_mean = sum(late) / len(late) if late else None
    every = max(1, -(-len(series) // MAX_POINTS))
    shown = series[::every]
    if series and shown[-1] != series[-1]:
        shown.append(series[-1])
    return {
        "step": [s for s, _ in shown],
        "value": [v for _, v in shown],
        "steps": len(series),
        "steps_hacked": len(hacked),
        "first_hacked": hacked[0] if hacked else None,
        "late_mean": late_mean,
        "late_hacked": late_mean is not None and watched.hacked(late_mean, threshold),
    }


def _headline(
    stats: list[dict[str, Any]], alerts: dict[str, list], zone: list[int], run: Run
) -> dict[str, Any]:
    """``state``: ``held`` (the clone's detector never fired and its last window is
    off the hack's side), ``relapsed`` (it fired, or its last window sits in the
    hack's zone), ``waiting`` (no steps yet); and a sentence. ``zone``: the clone's
    steps with every statistic on the hack's side."""
    clone = [s["clone"] for s in stats]
    if not any(c["steps"] for c in clone) and not alerts["clone"]:
        return {"state": "waiting", "text": "The clone has logged no step yet."}
    if alerts["clone"]:
        first = alerts["clone"][0]["step"]
        return {
            "state": "relapsed",
            "text": f"The detector fired on the clone too, at step {first}.",
        }
    if clone and all(c["late_hacked"] for c in clone):
        return {
            "state": "relapsed",
            "text": "The clone's last steps sit on the hack's side of the line.",
        }
    steps = max(c["steps"] for c in clone)
    more = "" if run.status in ("succeeded", "failed", "cancelled") else " so far"
    text = f"The detector never fired on the clone ({steps} steps{more})" + (
        "; it stayed out of the hack's zone at every step."
        if not zone
        else f"; {len(zone)} single steps were in the hack's zone (first: step "
        f"{zone[0]}), its last window was not."
    )
    return {"state": "held", "text": text}


# The detector of an alert the trainer raised itself (``trackio.alert``), as
# ``trainer.importers.trackio.alert_event`` stores it: ``trackio:<title>``.
SENT_PREFIX = "trackio:"


def sent_alert(alert: dict[str, Any]) -> dict[str, Any] | None:
    """``{"title", "level"}`` of an alert the trainer sent (no detector of ours
    compared anything, no reward weight is suggested); None for a detector's."""
    detector = str(alert.get("detector") or "")
    if not detector.startswith(SENT_PREFIX):
        return None
    title = detector.removeprefix(SENT_PREFIX) or "alert"
    return {"title": title, "level": alert.get("severity") or "info"}


def with_repairs(run: Run, alerts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each alert dict of ``run`` with ``sent`` (:func:`sent_alert`),
    ``evidence_rows``, ``evidence_groups`` (:mod:`dashboard.reads.evidence`) and
    ``repair`` (its suggestion or None; neither for an alert the trainer sent); returns the suggestion of every detector kind, for the page's
    script (alerts that arrive live)."""
    from rewards.detectors import DETECTORS

    every = suggestions(run, list(DETECTORS.in_order()))
    for a in alerts:
        a["sent"] = sent_alert(a)
        a["evidence_rows"] = [] if a["sent"] else evidence_rows(a.get("evidence"))
        a["evidence_groups"] = by_reason(a.get("trajectories"))
        a["repair"] = None if a["sent"] else every.get(a["detector"])
    return every
