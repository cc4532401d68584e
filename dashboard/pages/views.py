"""Run pages: home, the runs list, one run (live), cancel (compare:
:mod:`dashboard.pages.compare`).

Thin adapters (healthchecks style): load through ``services``/``dashboard.reads``, check
ownership (a run that is not the user's is a 404), render. Every response carries the
pages' Content-Security-Policy (:mod:`dashboard.pages.csp`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from dashboard.ingest import retention
from dashboard.library import datasets, roots
from dashboard.models import (
    ACTIVE_STATUSES,
    UNFINISHED_STATUSES,
    Alert,
    Run,
    RunStatus,
)
from dashboard.pages import catalog, charts, reward_weights, run_state
from dashboard.pages.csp import csp
from dashboard.reads import metrics, repair, reward_names, sparklines, whatif
from dashboard.reads import runs as run_reads
from dashboard.reads import trajectories as trajs
from dashboard.runs import kept_model, pausing, services
from dashboard.runs.waiting import paused_at, waiting
from trainer.metric_help import is_summary

COMPARE_MIN, COMPARE_MAX = 2, 8  # runs compare (and compare/task) takes
PAGE_SIZE = 50
EXPORT_LABELS = [
    ("metrics", "metrics of every step"),
    ("trajectories", "trajectories (text, rewards per step)"),
    ("token_arrays", "per-token arrays (most of the size)"),
    ("judgements", "judgements"),
    ("critical_paths", "critical paths"),
    ("alerts", "alerts"),
    ("checkpoints", "checkpoints"),
]


def _section(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    value = cfg.get(key)
    return value if isinstance(value, dict) else {}


def run_info(run: Run) -> dict[str, Any]:
    """What the templates show about a run's config at a glance. An external run's
    config is any JSON, so nothing here assumes our schema's types."""
    cfg = run.config if isinstance(run.config, dict) else {}
    preset = str(_section(cfg, "algorithm").get("preset") or "")
    model = _section(cfg, "model")
    steps = cfg.get("steps")
    return {
        "preset": preset,
        "preset_label": catalog.PRESET_LABELS.get(preset, preset)
        or (f"{run.framework} (external)" if run.external else ""),
        "kl": "" if run.external else catalog.kl_summary(_section(cfg, "algorithm")),
        "corrections": ""
        if run.external
        else catalog.corrections_summary(_section(cfg, "algorithm")),
        "env": str(_section(cfg, "env").get("name") or ""),
        "steps": steps if isinstance(steps, int) and steps >= 0 else 0,
        "model": _shown_model(run, model),
        "lora": _lora_text(model.get("lora")),
    }


def _lora_text(lora: Any) -> str:
    """``LoRA r 8, alpha 16.0, dropout 0.0 on q_proj, v_proj``; "" without LoRA."""
    if not isinstance(lora, dict):
        return ""
    parts = [f"{k} {lora[k]}" for k in ("r", "alpha", "dropout") if k in lora]
    modules = lora.get("target_modules")
    on = f" on {', '.join(map(str, modules))}" if isinstance(modules, list) else ""
    return f"LoRA {', '.join(parts)}{on}".rstrip()


@csp
def home(request: HttpRequest) -> HttpResponse:
    runs = run_reads.filter_runs(services.visible_runs(request.user), {})
    # Paused runs wait on their owner: listed with the active ones, not as ended.
    active = with_waiting(list(runs.filter(status__in=UNFINISHED_STATUSES)[:20]))
    recent = list(runs.exclude(status__in=UNFINISHED_STATUSES)[:10])
    shown = active + recent
    sparks = sparklines.sparklines(shown)
    alerts = (
        Alert.objects.filter(run__in=services.visible_runs(request.user))
        .select_related("run")
        .order_by("-id")[:10]
    )
    counts = run_state.status_counts(services.visible_runs(request.user))
    # What to watch now: the run heard from last of those training (an external
    # one: sending events now, not a client that stopped; ours beat every few
    # seconds), not the newest (a client that sent one batch a minute ago), else
    # the next one to start.
    live = max(
        (r for r in active if run_reads.receiving(r)),
        key=lambda r: r.heartbeat_at or r.created_at,
        default=None,
    )
    queued = [r for r in active if r.status == RunStatus.QUEUED]
    upcoming = (  # queued runs start oldest first
        None if live or not queued else min(queued, key=lambda r: r.created_at)
    )
    for a in alerts:
        a.sent = repair.sent_alert({"detector": a.detector, "severity": a.severity})
    return render(
        request,
        "pages/home.html",
        {
            "live": live,
            "live_info": run_info(live) if live else None,
            # an external one's: the page asks again when it would go quiet
            "live_quiet_in_s": run_state.home_banner_quiet_in_s(live),
            "quiet_check_ms": run_state.QUIET_CHECK_MS,
            "upcoming": upcoming,
            "active": [(r, run_info(r), sparks.get(r.pk, "")) for r in active],
            "recent": [(r, run_info(r), sparks.get(r.pk, "")) for r in recent],
            "alerts": alerts,
            "counts": counts,
        },
    )


@csp
def run_list(request: HttpRequest) -> HttpResponse:
    try:
        runs = run_reads.filter_runs(services.visible_runs(request.user), request.GET)
    except services.ServiceError as exc:
        return render(request, "400.html", {"errors": exc.errors}, status=400)
    page = Paginator(runs, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = with_waiting(list(page.object_list))
    sparks = sparklines.sparklines(rows)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "pages/list.html",
        {
            "page": page,
            "rows": [(r, run_info(r), sparks.get(r.pk, "")) for r in rows],
            "filters": request.GET,
            "query": query.urlencode(),
            "statuses": ["active", *RunStatus.values],
            "presets": catalog.preset_choices(),
            "envs": catalog.env_names(),
            "groups": run_reads.groups_of(services.visible_runs(request.user)),
            "sorts": [
                ("new", "newest"),
                ("old", "oldest"),
                ("name", "name"),
                ("status", "status"),
                ("progress", "progress"),
                ("reward", "latest reward"),
            ],
        },
    )


@csp
def run_detail(request: HttpRequest, run_id: Any) -> HttpResponse:
    run = services.get_run_for_user(request.user, run_id)
    reward_key = reward_names.reward_key(run)
    stats = run_reads.run_stats(run, reward_key)
    quiet_for = run_reads.quiet_for_s(run)
    alerts = run_reads.alert_dicts(run, run_reads.alerts(run))
    repairs = repair.with_repairs(run, alerts)  # the repair loop (issue 25)
    components = whatif.component_weights(run)  # what-if panel (issue 12)
    dataset = datasets.dataset_of_run(run)
    traj_steps = trajs.trajectory_steps(run)
    keys = metrics.metric_keys(run)
    page_data = {
        "run": str(run.pk),
        "status": run.status,
        "last_step": run.last_step,
        "frame_seq": run.frame_seq,
        "steps": run_info(run)["steps"],
        "charts": run_state.with_stopped_text(
            reward_weights.run_charts(run, keys, reward_key), run
        ),
        "metrics_url": f"/api/runs/{run.pk}/metrics",
        "backfill_url": f"/api/runs/{run.pk}/backfill",
        "trajectories_api": f"/api/runs/{run.pk}/trajectories",
        "trajectories_url": reverse("pages:trajectories", args=[run.pk]),
        "ws_path": f"/ws/runs/{run.pk}/",
        "alerts": [
            {"step": a["step"], "detector": a["detector"], "severity": a["severity"]}
            for a in alerts
        ],
        "latest_trajectory_step": trajs.nearest(traj_steps, None),
        # The metric the strip's rewards are read from (an external run's trainer
        # may log train/reward), and whether an external run is still sending.
        "reward_key": reward_key,
        "receiving": run_reads.receiving(run),
        "quiet_for_s": quiet_for,
        # the page's clock: wall time, and "not sending" past the server's threshold
        "clock": run_state.clock_data(run, stats.duration_s),
        "stats": {  # the strip's numbers, kept current by the page as frames arrive
            "best_reward": stats.best_reward,
            "best_step": stats.best_step,
            "last_step": run.last_step,
            "duration_s": stats.duration_s,
        },
        "trajectory_steps": traj_steps[-5000:],
        # a queued run's place in line, polled while it waits (issue 22, item 5)
        "run_api": f"/api/runs/{run.pk}",
        "warmup": run.warmup or {},
        "warmstart_steps": warmstart_steps(run),
    }
    attempts = roots.shown_errors(run, list(run.attempts.all()))  # no server path
    return render(
        request,
        "pages/detail.html",
        {
            "run": run,
            "info": run_info(run),
            "stats": stats,
            "alerts": alerts,
            "page_data": page_data,
            "metric_keys": keys,
            "summary": charts.summary_rows(
                metrics.latest_values(run, [k for k in keys if is_summary(k)])
            ),
            "export_parts": EXPORT_LABELS,
            "attempts": attempts,
            "clones": list(services.visible_runs(request.user).filter(parent=run)[:20]),
            "kept": kept_model.kept_model(run),  # the model it keeps (issue 22)
            "dataset": dataset,  # the upload it reads, by the name it was given
            # what-if panel (issue 12), opened from an alert with its fix (issue 25)
            "whatif_components": components,
            "whatif_addable": any(c["added"] for c in components),
            "repairs": repairs,
            "repairing": run.repair if run.repair.get("detector") else None,
            "active": run.status in ACTIVE_STATUSES,
            "is_swarm": run_info(run)["env"] == "swarm",
            # recording policy and retention (issue 15)
            "recording": recording_line(run, keys),
            "quiet_for": quiet_for,
            "detector_alerts": [a for a in alerts if not a["sent"]],
            "sent_alerts": [a for a in alerts if a["sent"]],
            "pruned": retention.pruned_line(run),
            "waiting": waiting(run),
            # the run cannot learn: every group's rewards alike (issue 22, item 9)
            "no_signal": no_signal_text(alerts),
            "warm_line": warm_line(run),
            # one notice in place of the charts before there is any to draw
            "charts_waiting": run_state.charts_waiting(run, keys),
            # paths as the form names them: no server path on a page
            "shown_config": roots.shown_config(run),
        },
    )


def no_signal_text(alerts: list[dict[str, Any]]) -> str | None:
    """The no-learning-signal alert's message under the banner that names it: its
    own "no learning signal: " prefix (which names it in alert lists) left out."""
    alert = next((a for a in alerts if a["detector"] == "no_learning_signal"), None)
    if alert is None:
        return None
    message = str(alert.get("message") or "")
    head = "no learning signal: "
    return message[len(head) :] if message.lower().startswith(head) else message


def recording_line(run: Run, metric_keys: list[str] | None = None) -> str:
    """What the run page says was recorded; an external run whose trajectories came
    as text only (trackio's tables and traces) says so instead of promising token
    arrays its trainer never sent, and one that sent none says what it sent."""
    line = retention.recording_line(run)
    tokens = trajs.has_token_data(run) if run.external else True
    if tokens is None:
        return run_state.sent_line(run, metric_keys or [], line)
    if tokens is False:
        line = line.replace("token arrays on", "no token data sent (text only)")
    return line


def warmstart_steps(run: Any) -> int:
    model = run.config.get("model") if isinstance(run.config, dict) else None
    steps = model.get("warmstart_steps") if isinstance(model, dict) else None
    return steps if isinstance(steps, int) and not run.external else 0


def warm_line(run: Any) -> str:
    """What a run busy before step 1 is doing (static/js/run_page.js says the same
    as progress arrives)."""
    if run.status != RunStatus.RUNNING or run.last_step:
        return ""
    warm = run.warmup or {}
    if warm.get("of"):
        return (
            f"warm start: {warm.get('done', 0)} of {run_state.plural(warm['of'], 'step')}"
            " (teaching the model the action format before RL; the charts start at "
            "step 1)"
        )
    if warmstart_steps(run):
        planned = run_state.plural(warmstart_steps(run), "step")
        return f"warm start: starting ({planned} before step 1)"
    return ""


def with_waiting(rows: list[Any]) -> list[Any]:
    """The runs list's rows, each queued one with its place in line (a paused demo's
    saying where it paused first), each external one gone quiet with
    ``quiet_for``."""
    for r in rows:
        line = waiting(r)
        r.waiting_text = "; ".join(filter(None, [paused_at(r), line and line["text"]]))
    return run_state.with_quiet(rows)


def _run_action(
    request: HttpRequest,
    run_id: Any,
    act: Callable[[Run], Run],
    said: Callable[[Run, str], tuple[str, str]],
) -> HttpResponse:
    """Cancel, Pause, Resume: ``act`` on the user's run, then what ``said(run,
    status before)`` tells them (text, message tags), or why it could not be done."""
    run = services.get_run_for_user(request.user, run_id)
    before = run.status
    try:
        run = act(run)
    except services.ServiceError as exc:
        messages.error(request, "; ".join(exc.errors))
    else:
        text, tags = said(run, before)
        messages.info(request, text, extra_tags=tags)
    return redirect("pages:run_detail", run.pk)


def _cancel_said(run: Run, before: str) -> tuple[str, str]:
    if run.status != RunStatus.CANCELLED:  # the page hides it once the run ends
        return "Cancel requested: the run stops at its next step.", "cancel-pending"
    if not run.last_step:
        return "Cancelled before it started: nothing ran.", ""
    was = "paused" if before == RunStatus.PAUSED else "queued"
    return (
        f"Cancelled while {was} after step {run.last_step}: it will not go on; what "
        "it recorded is kept.",
        "",
    )


def _pause_said(run: Run, before: str) -> tuple[str, str]:
    if run.status == RunStatus.PAUSED:
        return "Paused: it left the queue until you resume it.", ""
    return (  # the page hides it once the run pauses
        "Pause requested: the run stops at its next step and keeps its state.",
        "pause-pending",
    )


def _resume_said(run: Run, before: str) -> tuple[str, str]:
    where = f" from step {run.last_step}" if run.last_step else ""
    return f"Resumed: queued to go on{where}.", ""


@require_POST
@csp
def run_cancel(request: HttpRequest, run_id: Any) -> HttpResponse:
    return _run_action(request, run_id, services.cancel_run, _cancel_said)


@require_POST
@csp
def run_pause(request: HttpRequest, run_id: Any) -> HttpResponse:
    return _run_action(request, run_id, pausing.pause_run, _pause_said)


@require_POST
@csp
def run_resume(request: HttpRequest, run_id: Any) -> HttpResponse:
    return _run_action(request, run_id, pausing.resume_run, _resume_said)


def _compare_ids(request: HttpRequest) -> list[str]:
    ids: list[str] = []
    for raw in request.GET.getlist("runs"):
        ids.extend(p.strip() for p in raw.split(",") if p.strip())
    return list(dict.fromkeys(ids))


def _shown_model(run: Run, model: dict[str, Any]) -> str:
    """The model a run trains, its path as the form's picker names it (relative to
    its root: no server path on a page); an external run's as its trainer sent it."""
    path = model.get("path")
    if isinstance(path, str) and path and not run.external:
        return roots.shown(path, model=True)
    return str(path or model.get("size") or "")
