"""Sparklines: a run's reward at ~40 sampled steps, drawn as SVG path data, its NaN
and +-inf steps breaking the line and marked (the runs list, home)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from dashboard.models import MetricPoint, Run
from dashboard.reads.reward_names import REWARD, reward_keys

SPARK_POINTS = 40


def sample_steps(last_step: int, n: int = SPARK_POINTS) -> list[int]:
    """About ``n`` evenly spaced steps in ``1..last_step`` (always the last one)."""
    if last_step < 1:
        return []
    if last_step <= n:
        return list(range(1, last_step + 1))
    return sorted({1 + round(i * (last_step - 1) / (n - 1)) for i in range(n)})


@dataclass(frozen=True)
class Spark:
    """A run's sparkline (viewBox 0 0 100 24): ``line``, SVG path data of its finite
    values, broken where one is not; ``odd``, a tick on the top edge at each such
    step; ``note``, those steps in words ("NaN at steps 3, 7"), empty when none."""

    line: str
    odd: str = ""
    note: str = ""

    def __bool__(self) -> bool:
        return bool(self.line or self.odd)

    def __str__(self) -> str:
        return self.line


def sparklines(runs: Sequence[Run], key: str = REWARD) -> dict[Any, Spark]:
    """Each run's :class:`Spark` of ``key`` at sampled steps (``reward``: each run's
    reward, under whatever name its trainer logged it).

    Reads ~40 rows per run through the primary key (run, step, key) instead of
    scanning the run's series.
    """
    keys = reward_keys(runs) if key == REWARD else {r.pk: key for r in runs}
    cond = Q()
    for run in runs:
        steps = sample_steps(run.last_step)
        if steps:
            cond |= Q(run_id=run.pk, step__in=steps, key=keys[run.pk])
    if not cond:
        return {}
    series: dict[Any, list[tuple[int, float]]] = {}
    rows = MetricPoint.objects.filter(cond).values_list("run_id", "step", "value")
    for run_id, step, value in rows:
        if value is not None:
            series.setdefault(run_id, []).append((step, value))
    return {run_id: spark(sorted(points)) for run_id, points in series.items()}


def spark(points: Sequence[tuple[int, float]], w: float = 100, h: float = 24) -> Spark:
    """A :class:`Spark` of (step, value) points, NaN and ±inf among them: the line
    stops at such a step and starts again after it (it bridged them), and a tick on
    the top edge marks the step."""
    line = spark_svg(points, w, h)
    odd = [s for s, v in points if not math.isfinite(v)]
    if not odd:
        return Spark(line)
    xs = [p[0] for p in points]
    x0, dx = min(xs), (max(xs) - min(xs)) or 1
    ticks = " ".join(f"M{(s - x0) / dx * w:.1f},0V5" for s in odd)
    names = sorted({_odd_name(v) for _, v in points if not math.isfinite(v)})
    steps = ", ".join(str(s) for s in odd[:4]) + (", …" if len(odd) > 4 else "")
    word = "step" if len(odd) == 1 else "steps"
    return Spark(line, ticks, f"{'/'.join(names)} at {word} {steps}")


def _odd_name(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+∞" if v > 0 else "−∞")


def spark_svg(
    points: Sequence[tuple[int, float]], w: float = 100, h: float = 24
) -> str:
    """SVG path data of ``points`` in a ``w`` x ``h`` box: a step whose value is not
    a number (NaN, ±inf) breaks the line (the next point starts a new "M"); a point
    alone between two such steps is a dot (a zero-length segment, drawn with a round
    cap)."""
    finite_ys = [y for _, y in points if math.isfinite(y)]
    if not finite_ys:
        return ""
    xs = [p[0] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(finite_ys), max(finite_ys)
    dx = (x1 - x0) or 1
    dy = (y1 - y0) or 1
    parts: list[list[str]] = [[]]
    for x, y in points:
        if not math.isfinite(y):
            if parts[-1]:
                parts.append([])
            continue
        parts[-1].append(
            f"{(x - x0) / dx * w:.1f},{h - 1 - (y - y0) / dy * (h - 2):.1f}"
        )
    return " ".join(
        "M" + " ".join(p if len(p) > 1 else [p[0], p[0]]) for p in parts if p
    )
