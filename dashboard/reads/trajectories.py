"""Trajectories of a run: a step's groups, one trajectory with its judgements and
critical path, a task across steps and runs; and their JSON."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, Q

from dashboard import jsonsafe
from dashboard.errors import InvalidConfig
from dashboard.ingest import arrays, prompts
from dashboard.models import (
    CriticalPath,
    Judgement,
    Run,
    Trajectory,
)
from dashboard.reads.metrics import finite


# --- rows as JSON ----------------------------------------------------------------------
def trajectory_summary(t: Trajectory) -> dict[str, Any]:
    return {
        "step": t.step,
        "group": t.group,
        "index": t.index,
        "task_id": t.task_id,
        "dropped": t.dropped,
        "reward": jsonsafe.num(t.reward),  # None (none given) stays null
        "advantage": jsonsafe.num(t.advantage),
        "num_turns": t.num_turns,
        "length": t.length,
        "truncated": t.truncated,
        "rewards": t.rewards,
    }


def trajectory_detail(
    t: Trajectory, prompt_cache: dict | None = None
) -> dict[str, Any]:
    """A trajectory as sent: its segments with their per-token arrays decoded, the
    group's shared prompt first (``prompt_cache``: reuse one read per group)."""
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["segments"] = prompts.segments_of(t, prompt_cache)
    return out


def trajectory_text(t: Trajectory, prompt_cache: dict | None = None) -> dict[str, Any]:
    """:func:`trajectory_detail` without the per-token ids and floats (segments keep
    their text, tokens and mask)."""
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["segments"] = [
        {k: v for k, v in seg.items() if k not in ("n", "series")}
        for seg in prompts.meta_of(t, prompt_cache)
    ]
    return out


# --- one trajectory, a page at a time ----------------------------------------------------
@dataclass(frozen=True)
class SegmentPage:
    """Segments ``offset`` .. ``offset + len(segments) - 1`` of a trajectory, as many
    as fit the page's tokens and characters (at least one). A segment larger than the
    page on its own is cut to it and carries ``"cut": {"tokens": n, "chars": c}``,
    its whole size."""

    segments: list[dict[str, Any]]
    offset: int
    total: int  # segments in the trajectory, the shared prompt's included
    tokens: int  # tokens in the trajectory
    metas: list[dict[str, Any]]  # every segment's metadata (no arrays)

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.segments)
        return end if end < self.total else None


def page_budget(max_tokens: int | None, max_chars: int | None) -> tuple[int, int]:
    """A reader's page size (None: the default), refused past the ingest limits:
    a page never needs to be larger than one stored segment can be."""
    tokens = max_tokens or settings.TRAJECTORY_PAGE_TOKENS
    chars = max_chars or settings.TRAJECTORY_PAGE_CHARS
    if tokens > settings.TRAJECTORY_MAX_TOKENS:
        raise InvalidConfig(
            f"max_tokens: at most {settings.TRAJECTORY_MAX_TOKENS} "
            "(TRAJECTORY_MAX_TOKENS)"
        )
    if chars > settings.EVENT_MAX_TEXT_CHARS:
        raise InvalidConfig(
            f"max_chars: at most {settings.EVENT_MAX_TEXT_CHARS} (EVENT_MAX_TEXT_CHARS)"
        )
    return tokens, chars


def trajectory_page(
    t: Trajectory, offset: int, max_tokens: int | None, max_chars: int | None
) -> tuple[dict[str, Any], SegmentPage]:
    """:func:`trajectory_detail` a page of segments at a time: the summary, facts and
    agent steps, the page's segments with their arrays, and ``page`` saying where it
    is (the caller adds the ``next`` link)."""
    tokens, chars = page_budget(max_tokens, max_chars)
    page = segment_page(t, offset, tokens, chars)
    out = trajectory_summary(t)
    out["facts"] = t.facts
    out["steps"] = t.agent_steps
    out["clipped"] = t.clipped
    out["segments"] = page.segments
    out["page"] = {
        "offset": offset,
        "count": len(page.segments),
        "segments": page.total,
        "tokens": page.tokens,
        "max_tokens": tokens,
        "max_chars": chars,
        "next_offset": page.next_offset,
    }
    return out, page


def _text_len(meta: dict[str, Any]) -> int:
    text = meta.get("text")
    return len(text) if isinstance(text, str) else 0


def segment_page(
    t: Trajectory,
    offset: int,
    max_tokens: int,
    max_chars: int,
    prompt_cache: dict | None = None,
) -> SegmentPage:
    """The page of ``t``'s segments from ``offset`` (see :class:`SegmentPage`): only
    its segments' arrays are unpacked."""
    gp = prompts.prompt_of(t, prompt_cache)
    parts = prompts.split(gp.segments, bytes(gp.arrays)) if gp else []
    own = t.segments if isinstance(t.segments, list) else []
    parts += prompts.split(own, bytes(t.arrays or b""))
    metas = [m for m, _ in parts]
    page, tokens, chars = [], 0, 0
    for k in range(offset, len(parts)):
        meta, blob = parts[k]
        n, c = int(meta.get("n", 0)), _text_len(meta)
        if page and (tokens + n > max_tokens or chars + c > max_chars):
            break
        page.append(_page_segment(k, meta, blob, max_tokens, max_chars))
        tokens, chars = tokens + n, chars + c
    total_tokens = sum(int(m.get("n", 0)) for m in metas)
    return SegmentPage(page, offset, len(parts), total_tokens, metas)


def _page_segment(
    k: int, meta: dict[str, Any], blob: bytes, max_tokens: int, max_chars: int
) -> dict[str, Any]:
    n, c = int(meta.get("n", 0)), _text_len(meta)
    cut_meta, cut_blob = arrays.head_of_part(meta, blob, max_tokens)
    if c > max_chars:
        cut_meta = {**cut_meta, "text": meta["text"][:max_chars]}
    (seg,) = arrays.unpack_segments([cut_meta], cut_blob)
    seg = {"k": k, **seg}
    if n > max_tokens or c > max_chars:
        seg["cut"] = {"tokens": n, "chars": c}
    return seg


def judgement_dict(j: Judgement) -> dict[str, Any]:
    return {
        "step": j.step,
        "group": j.group,
        "index": j.index,
        "judge": j.judge,
        "backend": j.backend,
        "ok": j.ok,
        "score": None if j.score is None else jsonsafe.num(j.score),
        "scores": j.scores,
        "rationale": j.rationale,
        "raw": j.raw,
        "error": j.error,
        "target_step": j.target_step,
    }


def judgement_summary(j: Judgement) -> dict[str, Any]:
    """What a frame says of a judgement (``dashboard.ingest.fields.summarise``)."""
    return {
        "step": j.step,
        "group": j.group,
        "index": j.index,
        "judge": j.judge,
        "ok": j.ok,
        "score": None if j.score is None else jsonsafe.num(j.score),
    }


def critical_path_dict(c: CriticalPath) -> dict[str, Any]:
    return {
        "step": c.step,
        "group": c.group,
        "index": c.index,
        "stages": c.stages,
        "critical_steps": c.critical_steps,
        "total_steps": c.total_steps,
        "path": c.path,
    }


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


# --- a step's trajectories --------------------------------------------------------------
@dataclass
class Group:
    group: int
    task_id: str
    dropped: bool
    rollouts: list[Trajectory]
    hidden: int = 0


def filter_number(params: Any, name: str) -> float | None:
    """The number the filter ``name`` of ``params`` applies, or None."""
    try:
        value = float(params.get(name, ""))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def number_param(params: Any, name: str) -> bool:
    """Whether the filter ``name`` of ``params`` is a number it applies
    (:func:`step_groups` leaves any other value off)."""
    return filter_number(params, name) is not None


# A trajectory has token data when its length was counted or it has per-token
# arrays: text-only ones (trackio's tables and traces, imported text) have neither,
# and their stored ``length`` 0 means "not known", not "empty".
TOKEN_DATA = Q(length__gt=0) | ~Q(arrays=b"")


def has_token_data(run: Run) -> bool | None:
    """Does any trajectory of the run have token data? None: it has none stored."""
    if Trajectory.objects.filter(run=run).filter(TOKEN_DATA).exists():
        return True
    return None if not Trajectory.objects.filter(run=run).exists() else False


def step_groups(run: Run, step: int, params: Any) -> list[Group]:
    """The step's groups, each with its rollouts that pass the filters (each with
    ``token_data``: see :data:`TOKEN_DATA`)."""
    return filtered_groups(run, step, params)[0]


def filtered_groups(run: Run, step: int, params: Any) -> tuple[list[Group], int, int]:
    """(:func:`step_groups`, rollouts the filters hid, groups they hid whole): a
    group none of whose rollouts passes is not listed, its rollouts are counted."""
    rows = (
        Trajectory.objects.filter(run=run, step=step)
        .defer("segments", "arrays", "facts", "agent_steps")
        .annotate(token_data=ExpressionWrapper(TOKEN_DATA, BooleanField()))
        .order_by("group", "index")
    )
    lo, hi = filter_number(params, "reward_min"), filter_number(params, "reward_max")
    len_lo, len_hi = (
        filter_number(params, "length_min"),
        filter_number(params, "length_max"),
    )
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
    shown = [g for g in groups.values() if g.rollouts]
    hidden = sum(g.hidden for g in groups.values())
    return shown, hidden, len(groups) - len(shown)


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


# --- compare --------------------------------------------------------------------------
def task_firsts(run: Run) -> dict[str, int]:
    """Each task id the run sampled and the first step it did (of its first 20000
    trajectories)."""
    firsts: dict[str, int] = {}
    rows = (
        Trajectory.objects.filter(run=run)
        .exclude(task_id="")
        .values_list("task_id", "step")
        .order_by("step")[:20000]
    )
    for task, step in rows:
        firsts.setdefault(task, step)
    return firsts


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
