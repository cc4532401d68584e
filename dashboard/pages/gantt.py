"""The critical-path Gantt of an orchestration rollout (PARL): its stages one after
another, within each the orchestrator's own steps and then its sub-agents in
parallel, the critical path marked. Stored stages are read within the event schema's
bounds, anything not a step count as 0."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dashboard import jsonsafe
from dashboard.models import CriticalPath
from rewards.facts import as_count
from trainer.event_schema import MAX_PATH_SUBAGENTS, MAX_STAGES, MAX_SUBAGENTS


@dataclass(frozen=True)
class Bar:
    lane: int
    start: int
    steps: int
    label: str
    critical: bool
    ok: bool = True


@dataclass
class Gantt:
    bars: list[Bar]
    lanes: int
    span: int
    critical_steps: int
    total_steps: int
    stage_starts: list[int]

    # Geometry for the SVG: across in percent of its width, down in pixels (22 per
    # lane), so its labels keep their size on any screen (a 1000-unit viewBox drew
    # 11-unit labels 4 px tall on a phone).
    WIDTH = 100
    LANE = 22

    @property
    def height(self) -> int:
        return self.lanes * self.LANE + 24

    def legend(self) -> list[tuple[str, str]]:
        """(swatch classes, label) for the kinds of bar this chart draws, and only
        those: every colour in the legend is one the chart shows."""
        kinds = {(b.lane == 0, b.critical, b.ok) for b in self.bars}
        out = []
        if any(orch for orch, _, _ in kinds):
            out.append(("orch crit", "orchestrator (always on the critical path)"))
        if any(not orch and crit for orch, crit, _ in kinds):
            out.append(("crit", "sub-agent on the critical path (its stage's slowest)"))
        if any(not orch and not crit for orch, crit, _ in kinds):
            out.append(("par", "other sub-agents, in parallel"))
        if any(not ok for _, _, ok in kinds):
            out.append(("failed", "failed"))
        return out

    def rects(self) -> list[dict[str, Any]]:
        scale = self.WIDTH / max(1, self.span)
        return [
            {
                "x": round(b.start * scale, 3),
                "y": b.lane * self.LANE + 2,
                "w": max(0.1, round(b.steps * scale - 0.1, 3)),
                "h": self.LANE - 4,
                "bar": b,
            }
            for b in self.bars
        ]

    def ticks(self) -> list[dict[str, Any]]:
        """About ten step marks, the span's end always among them; a label sits
        right of its mark at 0, left of it at the end (inside the chart: a label
        starting at the right edge was drawn outside it), else centred."""
        scale = self.WIDTH / max(1, self.span)
        every = max(1, math.ceil(self.span / 10))
        marks = list(range(0, self.span + 1, every))
        if marks[-1] != self.span:
            if self.span - marks[-1] < every / 2:
                marks.pop()  # too close to the end's label
            marks.append(self.span)
        anchor = {0: "start", self.span: "end"} if self.span else {0: "start"}
        return [
            {"x": round(t * scale, 3), "t": t, "anchor": anchor.get(t, "middle")}
            for t in marks
        ]

    @property
    def axis_y(self) -> int:
        return self.lanes * self.LANE + 14

    @property
    def parallel_saving(self) -> float:
        return 1 - self.critical_steps / self.total_steps if self.total_steps else 0.0


def _steps(value: Any) -> int:
    """A stored step count as a bar's length: 0 for what is not one (rows stored
    before the schema checked them: text, lists, negatives, 1e308)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return min(as_count(value), 2**31 - 1)


def _list(value: Any, most: int) -> list:
    return value[:most] if isinstance(value, list | tuple) else []


def _stage(stage: Any) -> tuple[int, list[tuple[str, int, bool]]]:
    """(orchestrator steps, [(label, steps, success)]) from either stage spelling;
    at most the schema's sub-agents a stage (one bar each)."""
    if isinstance(stage, dict):
        subs = []
        for i, s in enumerate(_list(stage.get("subagents"), MAX_SUBAGENTS)):
            if isinstance(s, dict):
                subs.append(
                    (
                        jsonsafe.text(s.get("subtask", i), 200),
                        _steps(s.get("steps")),
                        s.get("success", True) is not False,
                    )
                )
            else:
                subs.append((str(i), _steps(s), True))
        return _steps(stage.get("orchestrator_steps")), subs
    if isinstance(stage, list | tuple) and len(stage) == 2:
        return _steps(stage[0]), [
            (str(i), _steps(s), True)
            for i, s in enumerate(_list(stage[1], MAX_SUBAGENTS))
        ]
    return 0, []


def gantt(cp: CriticalPath) -> Gantt:
    """Stages run one after another; within a stage the orchestrator's own steps come
    first, then its sub-agents in parallel. The critical path is every orchestrator
    bar plus each stage's slowest sub-agent (``cp.path``)."""
    bars: list[Bar] = []
    t = 0
    lanes = 1
    starts = []
    path = cp.path if isinstance(cp.path, list) else []
    drawn = 0
    for s, raw in enumerate(_list(cp.stages, MAX_STAGES)):
        if drawn >= MAX_PATH_SUBAGENTS:
            break  # stored before the schema bounded it
        orch, subs = _stage(raw)
        subs = subs[: MAX_PATH_SUBAGENTS - drawn]
        drawn += len(subs)
        starts.append(t)
        if orch:
            bars.append(Bar(0, t, orch, f"stage {s}: orchestrator", True))
        slowest = path[s] if s < len(path) else None
        for i, (label, steps, ok) in enumerate(subs):
            bars.append(
                Bar(i + 1, t + orch, steps, f"stage {s}: {label}", i == slowest, ok)
            )
        lanes = max(lanes, len(subs) + 1)
        t += orch + max((steps for _, steps, _ in subs), default=0)
    return Gantt(bars, lanes, t, cp.critical_steps, cp.total_steps, starts)
