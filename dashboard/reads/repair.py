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
from rewards.repair_additions import ADDITIONS, addition

MAX_POINTS = 1000  # per run and statistic on the chart (the verdict reads every step)
MAX_STEPS = 200_000  # steps read per run and key


def _config(run: Run) -> Any:
    """The ``TrainConfig`` of one of our runs; None for another trainer's."""
    from pydantic import ValidationError

    from trainer.config import TrainConfig

    if run.external:
        return None
    try:
        return TrainConfig.model_validate(run.config)
    except (ValidationError, ValueError, TypeError):
        return None


def _setup(run: Run) -> tuple[str, Any] | None:
    """(environment, reward config) of one of our runs; None for another trainer's."""
    from trainer.runner import reward_config_for

    cfg = _config(run)
    if cfg is None:
        return None
    try:
        return cfg.env.name, reward_config_for(cfg)
    except (ValueError, TypeError):
        return None


def addition_for(run: Run, detector: str) -> dict[str, Any] | None:
    """For one of our runs, the component whose addition removes ``detector``'s
    pattern (:func:`rewards.repair_additions.addition`: DAPO's overlong penalty against length
    drift), sized to the run's generation budget: ``{"name", "weight", "params",
    "why", "detector", "turns", "per_action", "total", "budget"}``. None for an
    external run, a detector no component fixes, or a reward that has it already
    (the ``dapo`` preset adds the overlong penalty itself)."""
    from trainer.runner import generation_budget, reward_config_for, turn_limit

    cfg = _config(run) if detector in ADDITIONS else None
    if cfg is None:
        return None
    r = cfg.rollout
    budget = generation_budget(cfg)
    try:
        added = addition(detector, reward_config_for(cfg), budget)
    except (ValueError, TypeError):
        return None
    if added is None:
        return None
    return {
        **added,
        "why": ADDITIONS[detector].why,
        "detector": detector,
        "turns": turn_limit(cfg),
        "per_action": r.max_action_tokens,
        "total": r.max_total_tokens,
        "budget": budget,
    }


def _present(run: Run) -> dict[str, str]:
    """The components of one of our runs' reward, each with where it comes from:
    ``reward`` (its config, or its environment's default) or ``shaping`` (DAPO's
    overlong shaping adds the overlong penalty when the run starts)."""
    from trainer.envs.base import default_reward_for

    cfg, setup = _config(run), _setup(run)
    if cfg is None or setup is None:
        return {}
    own = cfg.reward if cfg.reward is not None else default_reward_for(cfg.env.name)
    written = {c.name for c in own.components}
    return {
        c.name: "reward" if c.name in written else "shaping"
        for c in setup[1].components
    }


def _share(x: float) -> str:
    """A share as a whole percentage, never rounded up to "100%" short of all."""
    return "over 99%" if 0.995 <= x < 1 else f"{x:.0%}"


def no_signal_words(evidence: Any) -> str:
    """What a no-learning-signal alert found, from its evidence's numbers: "every
    group's rewards were equal" only when every group's were (a run may lower the
    threshold: at 50%, the alert fires with half its groups still learning)."""
    ev = evidence if isinstance(evidence, dict) else {}
    mean, limit = ev.get("zero_std_mean"), ev.get("threshold")

    def number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 1

    if not number(mean):
        return "most groups' rewards were equal"
    if mean >= 1:
        return "every group's rewards were equal over its last steps"
    said = f"{_share(mean)} of groups had equal rewards over its last steps"
    if number(limit):
        said += f" (this run's threshold: {_share(limit)})"
    return f"{said}; the other {_share(1 - mean)} still give a learning signal"


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
    ``evidence_rows``, ``evidence_groups`` (:mod:`dashboard.reads.evidence`),
    ``repair`` (its suggestion or None; neither for an alert the trainer sent),
    ``addition`` (:func:`addition_for`) and, of a no-learning-signal alert,
    ``signal_words`` (:func:`no_signal_words`); returns the suggestion of every
    detector kind, for the page's script (alerts that arrive live)."""
    from rewards.detectors import DETECTORS

    every = suggestions(run, list(DETECTORS.in_order()))
    fired = {a["detector"] for a in alerts} & set(ADDITIONS)
    added = {d: addition_for(run, d) for d in fired}
    present = _present(run) if any(v is None for v in added.values()) else {}
    for a in alerts:
        a["sent"] = sent_alert(a)
        a["evidence_rows"] = [] if a["sent"] else evidence_rows(a.get("evidence"))
        a["evidence_groups"] = by_reason(a.get("trajectories"))
        a["repair"] = None if a["sent"] else every.get(a["detector"])
        # no weight fixes it, a component added does: the clone form adds it
        a["addition"] = None if a["sent"] else added.get(a["detector"])
        fix = ADDITIONS.get(a["detector"])
        a["has_addition"] = present.get(fix.component, "") if fix else ""
        if a["detector"] == "no_learning_signal":
            a["signal_words"] = no_signal_words(a.get("evidence"))
    return every
