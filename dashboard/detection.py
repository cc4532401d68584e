"""Reward-hacking detectors on the server, for external runs, as their events arrive.

Our trainer runs the detectors itself (``rewards.monitor``) and streams the alerts;
TRL, verl and imported runs do not, so the dashboard runs the same pure detectors
(:data:`rewards.detectors.DETECTORS`) over the run's stored per-step summaries. It
keeps no state between requests: the window is read back from the database, and the
monitor's firing rule (at onset, then at most once per window while the pattern lasts)
is read from the stored alerts, so replaying a batch fires nothing twice.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from django.db.models import Count, Q

from dashboard import ingest
from dashboard.models import Alert, MetricPoint, Run, Trajectory

# Frameworks that run the detectors themselves and stream their alerts.
SELF_MONITORING = frozenset({"agentic-rl"})


def _summary_keys() -> dict[str, str]:
    """Stored metric -> the detectors' summary key (their own mapping, plus the
    per-episode values a trainer may log as step means under the same names)."""
    from rewards.detectors import _FROM_METRICS, _FROM_RESULTS

    keys = dict(_FROM_METRICS)
    keys.update({k: k for k in _FROM_RESULTS})
    return keys


def summaries(run: Run, first: int, last: int) -> dict[int, dict[str, float]]:
    """Per step in [first, last]: the detectors' summary, from stored metrics (and the
    share of truncated trajectories where no metric says it)."""
    keys = _summary_keys()
    out: dict[int, dict[str, float]] = defaultdict(dict)
    rows = MetricPoint.objects.filter(
        run=run, key__in=list(keys), step__gte=first, step__lte=last
    ).values_list("step", "key", "value")
    for step, key, value in rows:
        if value is not None and math.isfinite(value):
            out[step][keys[key]] = float(value)
    trunc = (
        Trajectory.objects.filter(run=run, step__gte=first, step__lte=last)
        .values("step")
        .annotate(n=Count("id"), t=Count("id", filter=Q(truncated=True)))
        .values_list("step", "n", "t")
    )
    for step, n, t in trunc:
        if n and "truncated" not in out[step]:
            out[step]["truncated"] = t / n
    for step, s in out.items():
        s["step"] = float(step)
    return out


def detect_external(run: Run, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alert events (already stored) that the new steps of ``events`` set off."""
    if run.framework in SELF_MONITORING:
        return []
    new_steps = sorted({e["step"] for e in events if e["type"] == "step"})
    if not new_steps:
        return []
    from rewards.config import DetectorConfig
    from rewards.monitor import enabled_detectors

    cfg = DetectorConfig()
    env = run.config.get("env") if isinstance(run.config, dict) else None
    env_name = env.get("name", "") if isinstance(env, dict) else ""
    specs = enabled_detectors(cfg, str(env_name))
    first = max(new_steps[0] - cfg.window + 1, 0)
    by_step = summaries(run, first, new_steps[-1])
    fired = defaultdict(list)
    for detector, step in Alert.objects.filter(
        run=run, step__gte=first - cfg.window, step__lte=new_steps[-1]
    ).values_list("detector", "step"):
        fired[detector].append(step)
    out = []
    for step in new_steps:
        window = [by_step[s] for s in sorted(by_step) if step - cfg.window < s <= step]
        if len(window) < cfg.min_steps:
            continue
        for spec in specs:
            recent = [s for s in fired[spec.name] if step - cfg.window < s <= step]
            if recent:
                continue
            finding = spec.fn(window, cfg)
            if finding is None:
                continue
            evidence = {
                "window": [int(window[0]["step"]), int(window[-1]["step"])],
                **finding.evidence,
                "source": "server",
            }
            out.append(
                {
                    "type": "alert",
                    "step": step,
                    "detector": spec.name,
                    "severity": spec.severity,
                    "message": finding.message,
                    "evidence": evidence,
                }
            )
            fired[spec.name].append(step)
    if out:
        batch = ingest.Batch()
        for ev in out:
            batch.add(run.pk, ev)
        ingest.write(run.pk, batch)
    return out
