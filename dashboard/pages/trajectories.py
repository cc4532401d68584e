"""Trajectory browser: a step's groups side by side, one trajectory in full, and the
critical-path view of an orchestration step.

The token arrays of one trajectory travel to the heatmap script in a
``<script type="application/json">`` block (``json_script``: HTML-escaped, never
executed, allowed by the CSP); the script sets every token with ``textContent``.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from dashboard.ingest import arrays
from dashboard.models import CriticalPath, Trajectory
from dashboard.pages import charts, gantt, reward_weights, trajview
from dashboard.pages import groups as groups_mod
from dashboard.pages.csp import csp
from dashboard.pages.views import warm_line
from dashboard.reads import trajectories as trajs
from dashboard.runs import services

FILTERS = ("reward_min", "reward_max", "sign", "length_min", "length_max", "dropped")
FILTERS += ("sort",)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _step_error(raw: str | None, asked: int | None, step: int | None) -> str:
    """What to tell someone whose ``?step=`` was not a step number (not silently the
    last step)."""
    if raw is None or raw.strip() == "" or asked is not None:
        return ""
    shown = f"; showing step {step}" if step is not None else ""
    return f"\u201c{raw[:40]}\u201d is not a step number{shown}."


NUMERIC_FILTERS = {
    "reward_min": "Reward \u2265",
    "reward_max": "Reward \u2264",
    "length_min": "Length \u2265",
    "length_max": "Length \u2264",
}


def _filter_errors(params: Any) -> dict[str, str]:
    """``{filter: what to tell}`` for each numeric filter whose value is no number
    (not silently no filter, as ``?step=`` says so too): the filter is left off."""
    errors = {}
    for name, label in NUMERIC_FILTERS.items():
        raw = params.get(name)
        if raw is None or raw.strip() == "" or trajs.number_param(params, name):
            continue
        errors[name] = (  # named as the link has it, and as the form labels it
            f"{name}: \u201c{raw[:40]}\u201d is not a number; the {label} filter "
            "is off."
        )
    for what in ("reward", "length"):  # a range no rollout can be in
        low, high = (trajs.filter_number(params, f"{what}_{e}") for e in ("min", "max"))
        if low is not None and high is not None and low > high:
            errors[f"{what}_min"] = (
                f"{what}_min: {low:g} is above {what}_max {high:g}, so no rollout "
                "passes both."
            )
    return errors


@csp
def trajectories(request: HttpRequest, run_id: Any) -> HttpResponse:
    run = services.get_run_for_user(request.user, run_id)
    steps = trajs.trajectory_steps(run)
    asked = _int(request.GET.get("step"))
    step = trajs.nearest(steps, asked)
    step_error = _step_error(request.GET.get("step"), asked, step)
    groups, hidden, hidden_groups = (
        trajs.filtered_groups(run, step, request.GET)
        if step is not None
        else ([], 0, 0)
    )
    if step is not None:  # group browser (issue 12): signal, divergence, sort
        groups_mod.annotate(run, step, groups, request.GET.get("sort", ""))
    pos = steps.index(step) if step is not None else -1
    filters = {k: request.GET.get(k, "") for k in FILTERS}
    filter_errors = _filter_errors(request.GET)
    return render(
        request,
        "pages/trajectories.html",
        {
            "run": run,
            "step": step,
            "asked": asked,
            "step_error": step_error,
            "steps_count": len(steps),
            "first_step": steps[0] if steps else None,
            "last_step": steps[-1] if steps else None,
            "prev_step": steps[pos - 1] if pos > 0 else None,
            "next_step": steps[pos + 1] if 0 <= pos < len(steps) - 1 else None,
            "groups": groups,
            "filters": filters,
            "filter_errors": filter_errors,
            "filtered": any(filters.values()),
            "shown": sum(len(g.rollouts) for g in groups),
            "hidden": hidden,  # of every group, those hidden whole too
            "hidden_groups": hidden_groups,
            "is_swarm": charts.env_name(run.config) == "swarm",
            "order": charts.component_names(run.config),
        },
    )


def _heatmap_data(page: trajs.SegmentPage) -> dict[str, Any]:
    """The token arrays of the page's segments, by position (the others: none)."""
    paged = {s["k"]: s for s in page.segments}
    segments = []
    for k, meta in enumerate(page.metas):
        s = paged.get(k, {})
        segments.append(
            {
                "kind": meta.get("kind"),
                "turn": meta.get("turn"),
                "mask": meta.get("mask"),
                "tokens": s.get("tokens") or [],
                "token_text": s.get("token_text") or None,
                "special": s.get("special") or [],
                "turns": s.get("turns") or [],
                "masked": s.get("masked") or [],
                "token_ids": s.get("token_ids"),
                "logprob": s.get("logprob"),
                "old_logprob": s.get("old_logprob"),
                "ratio": s.get("ratio"),
                "entropy": s.get("entropy"),
                "advantage": s.get("advantage"),
                "series": s.get("series") or {},
            }
        )
    return {"segments": segments}


def _trained_advantages(page: trajs.SegmentPage) -> list[float]:
    """The advantages of the page's trained tokens: segments trained on (``mask``
    None, not the prompt's or a tool's) less the positions masked from the loss;
    context tokens hold 0."""
    out = []
    for s in page.segments:
        meta = page.metas[s["k"]] if 0 <= s.get("k", -1) < len(page.metas) else {}
        if meta.get("mask") is not None or meta.get("kind") in ("prompt", "tool"):
            continue
        masked = {m[0] for m in s.get("masked") or [] if isinstance(m, list) and m}
        for i, a in enumerate(s.get("advantage") or []):
            if i in masked or isinstance(a, bool) or not isinstance(a, int | float):
                continue
            if math.isfinite(a):
                out.append(float(a))
    return out


def _advantage_range(page: trajs.SegmentPage) -> tuple[float, float] | None:
    """(lowest, highest) of the per-token advantages of the page's trained tokens
    when they differ (GAE or process credit gives each token its own, and the
    rollout's advantage is their mean); None when every one has the rollout's."""
    values = _trained_advantages(page)
    if not values or max(values) - min(values) <= 1e-9 * max(1.0, abs(max(values))):
        return None
    return min(values), max(values)


def _series_names(page: trajs.SegmentPage) -> list[str]:
    """The extra per-token arrays (``series``) any segment of the trajectory has, in
    order of first appearance: the heatmap can be coloured by each."""
    names: dict[str, None] = {}
    for meta in page.metas:
        names.update(dict.fromkeys(arrays.series_names(meta)))
    return list(names)


def _page_links(request: HttpRequest, page: trajs.SegmentPage) -> dict[str, Any]:
    """Where the page of a trajectory too large for one is, and the links on."""
    shown = sum(int(page.metas[s["k"]].get("n", 0)) for s in page.segments)
    whole = page.offset == 0 and page.next_offset is None
    nxt = page.next_offset
    return {
        "whole": whole and not any("cut" in s for s in page.segments),
        "first": page.offset,
        "last": page.offset + len(page.segments) - 1,
        "shown_tokens": shown,
        "start_url": request.path if page.offset else "",
        "next_url": f"{request.path}?from={nxt}#segment-{nxt}" if nxt else "",
    }


@csp
def trajectory(
    request: HttpRequest, run_id: Any, step: int, group: int, index: int
) -> HttpResponse:
    run = services.get_run_for_user(request.user, run_id)
    t = Trajectory.objects.filter(run=run, step=step, group=group, index=index).first()
    if t is None:
        raise Http404("no such trajectory")
    order = charts.component_names(run.config)
    offset = max(0, min(_int(request.GET.get("from")) or 0, 2**31 - 1))
    page = trajs.segment_page(
        t, offset, settings.TRAJECTORY_PAGE_TOKENS, settings.TRAJECTORY_PAGE_CHARS
    )
    judgements = trajs.judgements_for(run, step, group, index)
    run_weights = reward_weights.config_weights(run.config)
    view = trajview.build(t, judgements, order, page, run_weights=run_weights)
    cp = trajs.critical_path_for(run, step, group, index)
    siblings = list(
        Trajectory.objects.filter(run=run, step=step)
        .order_by("group", "index")
        .values_list("group", "index")
    )
    pos = siblings.index((group, index))
    link = lambda gi: reverse("pages:trajectory", args=[run.pk, step, *gi])  # noqa: E731
    return render(
        request,
        "pages/trajectory.html",
        {
            "run": run,
            "t": t,
            "view": view,
            "agent_steps": t.agent_steps if isinstance(t.agent_steps, list) else [],
            "gantt": gantt.gantt(cp) if cp else None,
            "cp": cp,
            "prev_url": link(siblings[pos - 1]) if pos > 0 else "",
            "next_url": link(siblings[pos + 1]) if pos < len(siblings) - 1 else "",
            "heatmap": _heatmap_data(page),
            # Tokens to colour (a trainer that sent text only stored none: the colour
            # controls would change nothing).
            "colourable": page.tokens > 0,
            "advantage_range": _advantage_range(page),
            "series": _series_names(page),
            "answers": trajview.answers(t.facts, t.rewards),
            # No tokens counted nor stored (a trainer that sent text only): its
            # ``length`` 0 is "not known" (reads.trajectories.TOKEN_DATA).
            "token_data": t.length > 0 or bool(t.arrays),
            "page": _page_links(request, page),
            "page_chars": settings.TRAJECTORY_PAGE_CHARS,
            "step_url": reverse("pages:trajectories", args=[run.pk]) + f"?step={step}",
        },
    )


def _parallel_step(run: Any, steps: list[int]) -> int | None:
    """The latest step where a rollout ran sub-agents side by side (its total work
    exceeds its critical path); None when no step did."""
    return (
        CriticalPath.objects.filter(run=run, total_steps__gt=F("critical_steps"))
        .order_by("-step")
        .values_list("step", flat=True)
        .first()
    )


@csp
def critical_path(request: HttpRequest, run_id: Any) -> HttpResponse:
    run = services.get_run_for_user(request.user, run_id)
    steps = list(
        CriticalPath.objects.filter(run=run)
        .order_by("step")
        .values_list("step", flat=True)
        .distinct()
    )
    parallel_step = _parallel_step(run, steps)
    asked = _int(request.GET.get("step"))
    # Opened without a step: where there is something parallel to see, if anywhere.
    step = trajs.nearest(steps, asked if asked is not None else parallel_step)
    step_error = _step_error(request.GET.get("step"), asked, step)
    paths = trajs.critical_paths(run, step) if step is not None else []
    rewards = (
        {
            (t.group, t.index): t
            for t in Trajectory.objects.filter(run=run, step=step).only(
                "group", "index", "reward", "advantage", "rewards", "task_id"
            )
        }
        if step is not None
        else {}
    )
    # The rollout asked for, else (a rollout with sub-agents when the step has one)
    # the most parallel saving, then the most sub-agents: the page says which rule.
    picked = gantt.pick(
        paths, _int(request.GET.get("group")), _int(request.GET.get("index"))
    )
    chosen = picked.cp
    rows = [
        (cp, rewards.get((cp.group, cp.index)), cp.total_steps - cp.critical_steps)
        for cp in paths
    ]
    pos = steps.index(step) if step is not None else -1
    return render(
        request,
        "pages/critical_path.html",
        {
            "run": run,
            "step": step,
            "rows": rows,
            "chosen": chosen,
            "picked": picked,
            # Opened without a step: say which step that is (the latest, or the latest
            # with parallel sub-agents: ``picked_parallel``).
            "step_asked": asked is not None,
            "chosen_traj": rewards.get((chosen.group, chosen.index))
            if chosen
            else None,
            "gantt": gantt.gantt(chosen) if chosen else None,
            "chosen_subagents": picked.subagents,
            "step_error": step_error,
            "step_subagents": sum(1 for cp in paths if gantt.subagents(cp)),
            "parallel_step": parallel_step if parallel_step != step else None,
            # Opened without a step at an earlier one than the run's last: say why.
            "picked_parallel": asked is None
            and step is not None
            and step == parallel_step
            and step != steps[-1],
            "last_path_step": steps[-1] if steps else None,
            # Before step 1 (a warm start, a queue) there is nothing yet to record.
            "before_step_1": not steps and not run.last_step,
            "warm": warm_line(run),
            "order": charts.component_names(run.config),
            "prev_step": steps[pos - 1] if pos > 0 else None,
            "next_step": steps[pos + 1] if 0 <= pos < len(steps) - 1 else None,
        },
    )
