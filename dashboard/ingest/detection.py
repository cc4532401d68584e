"""Reward-hacking detectors on the server, for external runs, as their events arrive.

Our trainer runs the detectors itself (``rewards.monitor``) and streams the alerts;
TRL, verl and imported runs do not, so the dashboard runs the same pure detectors
(:data:`rewards.detectors.DETECTORS`) over the run's stored per-step summaries, with
the run's own detector settings (its config's ``reward.detectors``, else the
defaults). It keeps no state between requests: the windows are read back from the
database, and the monitor's firing rule (at onset, then not again until the pattern
has been absent for a whole window, or for n windows once it fired n times:
:func:`rewards.monitor.rearm_steps`) is worked out from the findings of the steps
before and the alerts stored before them, so the server raises the alerts the
trainer would have raised for the same numbers; an alert already stored at its step
is not raised again (a replayed batch).

An alert names the trajectories of its step that show its pattern
(``rewards.evidence``): those arriving in the same batch and those stored before.
Detection runs before the batch is stored, and its alerts are stored with the batch,
so the recording policy keeps the groups they point at. Trajectories of an alerted
step that arrive in a later batch (a trainer that sends the step's metrics first)
are judged by the same predicate as they arrive, added to the alert, and kept.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from typing import Any

from django.db.models import Count, Q

from dashboard.ingest.fields import alert_trajectories
from dashboard.jsonsafe import as_int
from dashboard.models import Alert, Judgement, MetricPoint, Run, Trajectory
from rewards.config import DetectorConfig
from rewards.evidence import mark_equal_groups

# Frameworks that run the detectors themselves and stream their alerts.
SELF_MONITORING = frozenset({"agentic-rl"})


def _summary_keys() -> dict[str, str]:
    """Stored metric -> the detectors' summary key (their own mapping, plus the
    per-episode values a trainer may log as step means: under the same names, or as
    ``<name>/mean`` as ours does)."""
    from rewards.detectors import _FROM_METRICS, _FROM_RESULTS

    keys = {f"{k}/mean": k for k in _FROM_RESULTS}
    keys.update({k: k for k in _FROM_RESULTS})
    keys.update(_FROM_METRICS)
    return keys


@functools.lru_cache(maxsize=1024)
def _component_key(key: str) -> str | None:
    """``rewards/<c>/mean`` -> ``component/<c>`` (what each reward term paid)."""
    from rewards.detectors import component_means

    return next(iter(component_means({key: 0.0})), None)


def summaries(
    run: Run, first: int, last: int, events: list[dict[str, Any]] = ()
) -> dict[int, dict[str, float]]:
    """Per step in [first, last]: the detectors' summary, from stored metrics and
    those of ``events`` (not stored yet), and the share of truncated trajectories
    where no metric says it."""
    keys = _summary_keys()
    out: dict[int, dict[str, float]] = defaultdict(dict)
    rows = MetricPoint.objects.filter(
        Q(key__in=list(keys)) | Q(key__startswith="rewards/", key__endswith="/mean"),
        run=run,
        step__gte=first,
        step__lte=last,
    ).values_list("step", "key", "value")
    fresh = [
        (e["step"], k, v)
        for e in events
        if e["type"] == "step" and first <= e["step"] <= last
        for k, v in e["metrics"].items()
    ]
    for step, key, value in [*rows, *fresh]:
        name = keys.get(key) or _component_key(key)
        value = _finite(value)
        if name is not None and value is not None:
            out[step][name] = value
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    arriving = {
        (e["step"], e["group"], e["index"]): bool(e.get("truncated"))
        for e in events
        if e["type"] == "trajectory" and first <= e["step"] <= last
    }
    stored = (
        Trajectory.objects.filter(run=run, step__gte=first, step__lte=last)
        .values("step")
        .annotate(n=Count("id"), t=Count("id", filter=Q(truncated=True)))
        .values_list("step", "n", "t")
    )
    for step, n, t in stored:
        counts[step][0] += n
        counts[step][1] += t
    for (step, _, _), truncated in arriving.items():  # a replayed one counts twice
        counts[step][0] += 1
        counts[step][1] += truncated
    for step, (n, t) in counts.items():
        if n and "truncated" not in out[step]:
            out[step]["truncated"] = t / n
    for step, s in out.items():
        s["step"] = float(step)
    return out


def with_run_start(
    run: Run, by_step: dict[int, dict[str, float]], events: list[dict[str, Any]]
) -> dict[int, dict[str, float]]:
    """``by_step`` with the run's start levels in each summary (``start/<key>``,
    :func:`rewards.start_levels.with_start`): each key's first ``START_STEPS`` values in
    the run, stored or arriving, those up to each step, as the trainer's monitor
    sees them. Read by index seeks (the first few steps of each metric name that
    feeds the key), never by a scan of the run's points."""
    from rewards.start_levels import START_KEYS, START_STEPS, with_start

    names = _summary_keys()
    found: dict[str, dict[int, float]] = {key: {} for key in START_KEYS}
    for key in START_KEYS:
        for name in (n for n, k in names.items() if k == key):
            for step, value in (
                MetricPoint.objects.filter(run=run, key=name)
                .order_by("step")
                .values_list("step", "value")[:START_STEPS]
            ):
                value = _finite(value)
                if value is not None:
                    found[key].setdefault(step, value)
        for e in events:
            if e["type"] != "step":
                continue
            for name, value in e["metrics"].items():
                value = _finite(value)
                if names.get(name) == key and value is not None:
                    found[key][e["step"]] = value
    firsts = {
        key: sorted(values.items())[:START_STEPS] for key, values in found.items()
    }
    return {
        step: with_start(
            s, {k: [v for t, v in pairs if t <= step] for k, pairs in firsts.items()}
        )
        for step, s in by_step.items()
    }


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def detector_config(run: Run) -> DetectorConfig:
    """The run's detector settings: its config's ``reward.detectors`` when they are
    valid ones, else the defaults."""
    config = run.config if isinstance(run.config, dict) else {}
    reward = config.get("reward")
    given = reward.get("detectors") if isinstance(reward, dict) else None
    if isinstance(given, dict):
        try:
            return DetectorConfig.model_validate(given)
        except ValueError:  # another trainer's config: ours do not apply
            pass
    return DetectorConfig()


def _settings(run: Run) -> tuple[DetectorConfig, list[Any]]:
    from rewards.monitor import enabled_detectors

    cfg = detector_config(run)
    env = run.config.get("env") if isinstance(run.config, dict) else None
    env_name = env.get("name", "") if isinstance(env, dict) else ""
    return cfg, enabled_detectors(cfg, str(env_name))


def detect_external(run: Run, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alert events that the new steps of ``events`` set off (not stored: the caller
    stores them with the batch), each naming the trajectories that show it."""
    if run.framework in SELF_MONITORING:
        return []
    new_steps = sorted({e["step"] for e in events if e["type"] == "step"})
    if not new_steps:
        return []
    from rewards.monitor import rearm_steps

    cfg, specs = _settings(run)
    # Each detector's alerts so far (how long its pattern must be absent to fire
    # again), and those at the new steps (a replayed batch raises them not again).
    before = list(
        Alert.objects.filter(run=run, step__lte=new_steps[-1]).values_list(
            "detector", "step", "evidence__source"
        )
    )
    new = set(new_steps)
    stored = {(d, s) for d, s, _ in before if s in new}
    fired: dict[str, list[int]] = defaultdict(list)
    for detector, at, source in before:
        if source == "server":  # not the alerts a client sent of its own
            fired[detector].append(at)
    # The findings of the steps before each new one (as far back as its re-arming
    # asks) decide whether it fires, and each of those reads a window of its own.
    back = max((rearm_steps(cfg.window, len(v)) for v in fired.values()), default=0)
    back = max(back, cfg.window)
    first = max(new_steps[0] - back - cfg.window + 1, 0)
    by_step = with_run_start(run, summaries(run, first, new_steps[-1], events), events)
    findings = _Findings(by_step, cfg)
    out = []
    for step in new_steps:
        rows: list[tuple[tuple[int, int, str], dict[str, float]]] | None = None
        for spec in specs:
            finding = findings.at(spec, step)
            if finding is None or (spec.name, step) in stored:
                continue
            n = sum(at < step for at in fired[spec.name])
            if any(
                findings.at(spec, t) is not None
                for t in range(step - rearm_steps(cfg.window, n), step)
            ):
                continue  # the pattern was seen too recently: still the same one
            fired[spec.name].append(step)
            window = findings.window(step)
            evidence = {
                "window": [int(window[0]["step"]), int(window[-1]["step"])],
                **finding.evidence,
                "source": "server",
            }
            if rows is None:
                rows = trajectory_rows(run, step, events)
            refs, matched = _pick(spec.name, rows, evidence, cfg)
            evidence["trajectories_matched"] = matched
            out.append(
                {
                    "type": "alert",
                    "step": step,
                    "detector": spec.name,
                    "severity": spec.severity,
                    "message": finding.message,
                    "evidence": evidence,
                    "trajectories": refs,
                }
            )
    return out


class _Findings:
    """Each detector's finding at each step, over the summaries read (memoised)."""

    def __init__(self, by_step: dict[int, dict[str, float]], cfg: DetectorConfig):
        self.by_step, self.cfg = by_step, cfg
        self.steps = sorted(by_step)
        self.memo: dict[tuple[str, int], Any] = {}

    def window(self, step: int) -> list[dict[str, float]]:
        return [
            self.by_step[s] for s in self.steps if step - self.cfg.window < s <= step
        ]

    def at(self, spec: Any, step: int) -> Any:
        key = (spec.name, step)
        if key not in self.memo:
            self.memo[key] = None
            window = self.window(step)
            # A step never sent had no finding.
            if step in self.by_step and len(window) >= self.cfg.min_steps:
                self.memo[key] = spec.fn(window, self.cfg)
        return self.memo[key]


def _pick(
    detector: str,
    rows: list[tuple[tuple[int, int, str], dict[str, float]]],
    evidence: dict[str, Any],
    cfg: DetectorConfig,
) -> tuple[list[dict[str, Any]], int]:
    from rewards.evidence import pick

    picked, matched = pick(detector, [r for _, r in rows], evidence, cfg)
    refs = [
        {"group": g, "index": i, "task_id": task, "why": why}
        for (g, i, task), why in ((rows[p][0], why) for p, why in picked)
    ]
    return refs, matched


def trajectory_rows(
    run: Run, step: int, events: list[dict[str, Any]], *, stored: bool = True
) -> list[tuple[tuple[int, int, str], dict[str, float]]]:
    """The trajectories of ``step`` as the evidence predicates read them, in (group,
    index) order: ``((group, index, task_id), numbers)``, from ``events`` and (with
    ``stored``) the rows stored before."""
    found: dict[tuple[int, int], tuple[str, dict[str, float]]] = {}
    if stored:
        for g, i, task, length, truncated, facts, reward in Trajectory.objects.filter(
            run=run, step=step
        ).values_list(
            "group", "index", "task_id", "length", "truncated", "facts", "reward"
        ):
            numbers = _numbers(length, truncated, facts, {"reward": reward})
            found[(g, i)] = (task, numbers)
    for ev in events:
        if ev["type"] == "trajectory" and ev["step"] == step:
            numbers = _numbers(
                ev.get("length", 0), ev.get("truncated"), ev.get("facts"), ev
            )
            found[(ev["group"], ev["index"])] = (ev.get("task_id", ""), numbers)
    for key, score in _judge_scores(run, step, events, stored).items():
        if key in found:
            found[key][1].setdefault("judge/score", score)
    rows = [((g, i, task), nums) for (g, i), (task, nums) in sorted(found.items())]
    mark_equal_groups([nums for _, nums in rows], [g for (g, _, _), _ in rows])
    return rows


def _numbers(
    length: Any, truncated: Any, facts: Any, event: dict[str, Any]
) -> dict[str, float]:
    """One trajectory's numbers: its per-trajectory ``metrics`` when the trainer sent
    them (``parallelism``, ``judge/score``...), its length, truncation, success,
    and the mean entropy of its trained tokens when the event carries it."""
    out: dict[str, float] = {}
    metrics = event.get("metrics")
    for key, value in metrics.items() if isinstance(metrics, dict) else ():
        value = _finite(value)
        if value is not None:
            out[str(key)] = value
    reward = _finite(event.get("reward"))
    if reward is not None:
        out.setdefault("reward", reward)
    out.setdefault("length", float(as_int(length)))
    out.setdefault("truncated", float(bool(truncated)))
    if isinstance(facts, dict) and "success" in facts:
        out.setdefault("success", float(facts.get("success") is True))
    entropy = _entropy(event.get("segments"))
    if entropy is not None:
        out.setdefault("entropy", entropy)
    return out


def _entropy(segments: Any) -> float | None:
    values = [
        v
        for seg in (segments if isinstance(segments, list) else [])
        if isinstance(seg, dict) and seg.get("mask") is None
        for v in (seg.get("entropy") or [])
        if _finite(v) is not None
    ]
    return sum(values) / len(values) if values else None


def _judge_scores(
    run: Run, step: int, events: list[dict[str, Any]], stored: bool
) -> dict[tuple[int, int], float]:
    """(group, index) -> the mean of its judges' usable scores at ``step``."""
    scores: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    if stored:
        for g, i, judge, score in Judgement.objects.filter(
            run=run, step=step, ok=True, score__isnull=False
        ).values_list("group", "index", "judge", "score"):
            scores[(g, i)][judge] = score
    for ev in events:
        if ev["type"] == "judgement" and ev["step"] == step and ev.get("ok", True):
            score = _finite(ev.get("score"))
            if score is not None:
                scores[(ev["group"], ev["index"])][ev["judge"]] = score
    return {
        key: sum(v for v in by.values() if math.isfinite(v)) / len(by)
        for key, by in scores.items()
        if by
    }


def late_evidence(run: Run, events: list[dict[str, Any]]) -> dict[int, set[int]]:
    """Trajectories of ``events`` whose step already has a server alert stored (its
    metrics came in an earlier batch): each alert's predicate judges them, the ones
    that show its pattern are added to the alert, and their groups are returned
    (step -> groups) for the recording policy to keep."""
    if run.framework in SELF_MONITORING:
        return {}
    steps = {e["step"] for e in events if e["type"] == "trajectory"}
    if not steps:
        return {}
    alerts = list(
        Alert.objects.filter(
            run=run, step__in=steps, evidence__source="server"
        ).order_by("step", "detector")
    )
    cfg = detector_config(run)
    out: dict[int, set[int]] = defaultdict(set)
    rows_of: dict[int, Any] = {}
    for alert in alerts:
        if alert.step not in rows_of:
            rows_of[alert.step] = trajectory_rows(run, alert.step, events, stored=False)
        refs, _ = _pick(alert.detector, rows_of[alert.step], alert.evidence, cfg)
        merged = alert_trajectories([*alert.trajectories, *refs])
        if len(merged) > len(alert.trajectories):
            from rewards.evidence import MAX_TRAJECTORIES

            matched = alert.evidence.get("trajectories_matched")
            matched = matched if type(matched) is int else 0
            alert.evidence["trajectories_matched"] = (
                max(matched, 0) + len(merged) - len(alert.trajectories)
            )
            alert.trajectories = merged[:MAX_TRAJECTORIES]
            alert.save(update_fields=["trajectories", "evidence"])
        out[alert.step].update(r["group"] for r in alert.trajectories)
    return out
