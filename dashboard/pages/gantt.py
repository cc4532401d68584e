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
    stage: int = 0
    # The sub-agent's subtask as the rollout named it (model-made text: the template
    # escapes it); "" for the orchestrator and for sub-agents stored without one.
    name: str = ""


@dataclass
class Gantt:
    bars: list[Bar]
    lanes: int
    span: int
    critical_steps: int
    total_steps: int
    stage_starts: list[int]

    # Geometry for the SVG: across in percent of its width, down in pixels (a row of
    # stage numbers, then 22 per lane), so its labels keep their size on any screen (a
    # 1000-unit viewBox drew 11-unit labels 4 px tall on a phone). The lane labels
    # beside it (HTML) use the same heights: .gantt-lanes in app.css.
    WIDTH = 100
    HEAD = 18
    LANE = 22
    # Room a stage number takes, in percent of the width, a digit (12 px digits
    # clear on a 330 px phone chart) and its offset from its stage's line.
    DIGIT = 2.5

    @property
    def height(self) -> int:
        return self.HEAD + self.lanes * self.LANE + 24

    def lane_labels(self) -> list[str]:
        """What each lane (row) is: the orchestrator, then sub-agent k of every stage
        (a stage's k-th sub-agent, numbered from 0 as the stored path is)."""
        return ["orchestrator"] + [f"sub-agent {k}" for k in range(self.lanes - 1)]

    def stage_marks(self) -> list[dict[str, Any]]:
        """Where each stage starts; its number is drawn where it does not crowd the
        one before (hundreds of 1-step stages on a phone)."""
        scale = self.WIDTH / max(1, self.span)
        room = lambda s: 1 + self.DIGIT * len(str(s))  # noqa: E731
        out, free = [], 0.0  # free: where the next number may start
        for s, t in enumerate(self.stage_starts):
            x = round(t * scale, 3)
            shown = x >= free and x + room(s) <= self.WIDTH
            free = x + room(s) if shown else free
            out.append({"x": x, "stage": s, "shown": shown})
        return out

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
                "y": self.HEAD + b.lane * self.LANE + 2,
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
        return self.HEAD + self.lanes * self.LANE + 14

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
    """(orchestrator steps, [(subtask, steps, success)]) from either stage spelling
    (subtask "" where none was stored); at most the schema's sub-agents a stage (one
    bar each)."""
    if isinstance(stage, dict):
        subs = []
        for s in _list(stage.get("subagents"), MAX_SUBAGENTS):
            if isinstance(s, dict):
                name = s.get("subtask")
                subs.append(
                    (
                        "" if name is None else jsonsafe.text(name, 200),
                        _steps(s.get("steps")),
                        s.get("success", True) is not False,
                    )
                )
            else:
                subs.append(("", _steps(s), True))
        return _steps(stage.get("orchestrator_steps")), subs
    if isinstance(stage, list | tuple) and len(stage) == 2:
        return _steps(stage[0]), [
            ("", _steps(s), True) for s in _list(stage[1], MAX_SUBAGENTS)
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
            bars.append(Bar(0, t, orch, f"stage {s}, orchestrator", True, stage=s))
        slowest = path[s] if s < len(path) else None
        for i, (name, steps, ok) in enumerate(subs):
            label = f"stage {s}, sub-agent {i}" + (f" ({name})" if name else "")
            crit = i == slowest
            bars.append(Bar(i + 1, t + orch, steps, label, crit, ok, s, name))
        lanes = max(lanes, len(subs) + 1)
        t += orch + max((steps for _, steps, _ in subs), default=0)
    return Gantt(bars, lanes, t, cp.critical_steps, cp.total_steps, starts)


def subagents(cp: CriticalPath) -> int:
    """How many sub-agents a rollout spawned, over all its stages (either stage
    spelling, within the bounds the chart draws)."""
    return sum(len(_stage(s)[1]) for s in _list(cp.stages, MAX_STAGES))


@dataclass(frozen=True)
class Pick:
    """The rollout the page draws and why: ``how`` is "asked" (the address named
    it), else the default's rule: "saving" (its parallel sub-agents saved the most
    steps), "subagents" (sub-agents, none side by side: the most of them) or "first"
    (nothing spawned one: the first listed). ``missing`` is the (group, index) asked
    for that the step does not have; ``tied`` how many others shared its rank."""

    cp: CriticalPath | None
    how: str = "first"
    missing: tuple[int, int] | None = None
    tied: int = 0
    # Of those tied, how many also had as many sub-agents (the next rule).
    tied_subs: int = 0

    @property
    def saving(self) -> int:
        return self.cp.total_steps - self.cp.critical_steps if self.cp else 0

    @property
    def subagents(self) -> int:
        return subagents(self.cp) if self.cp else 0

    @property
    def why(self) -> str:
        """Why this rollout is the one drawn, as the rest of a sentence."""
        if self.how == "asked":
            return "the rollout you chose"
        if self.how == "first":
            return "the first listed, as no rollout of this step spawned sub-agents"
        others = f"{self.tied} other{'s' if self.tied != 1 else ''}"
        if self.how == "subagents":
            why = (
                f"chosen by default as the rollout of this step with the most "
                f"sub-agents ({self.subagents}); none of its rollouts ran two side "
                "by side, so none saved steps"
            )
            tie = f"; {others} had as many: it is the first listed"
        else:
            why = (
                "chosen by default as the rollout of this step whose sub-agents, run "
                f"in parallel, saved the most steps ({self.saving} of its "
                f"{self.cp.total_steps})"
            )
            tie = f"; {others} saved as many: " + (
                "it is the first listed"
                if self.tied_subs == self.tied
                else f"it has the most sub-agents ({self.subagents})"
                + (", the first listed of those" if self.tied_subs else "")
            )
        return why + (tie if self.tied else "")


def pick(paths: list[CriticalPath], group: int | None, index: int | None) -> Pick:
    """The rollout asked for when the step has it; else the one with sub-agents when
    any has them, the most parallel saving, then the most sub-agents, then the first
    listed (lowest group, then index)."""
    for cp in paths:
        if (cp.group, cp.index) == (group, index):
            return Pick(cp, "asked")
    missing = (group, index) if group is not None and index is not None else None
    if not paths:
        return Pick(None, missing=missing)
    rank = {
        id(c): (subagents(c) > 0, c.total_steps - c.critical_steps, subagents(c))
        for c in paths
    }
    best = max(paths, key=lambda c: (rank[id(c)], -c.group, -c.index))
    top = rank[id(best)]
    how = "saving" if top[0] and top[1] > 0 else "subagents" if top[0] else "first"
    # Tied on the rule the page names: the saving, or (no saving) the sub-agents.
    first = 2 if how == "saving" else 3
    tied = sum(1 for c in paths if rank[id(c)][:first] == top[:first]) - 1
    tied_subs = sum(1 for c in paths if rank[id(c)] == top) - 1
    return Pick(best, how, missing, tied, tied_subs)
