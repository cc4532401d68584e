"""What the pages say about where a run stands, beyond its status: whether an
external run is still sending (trackio's client has no finish call), what such a run
sent, and where a run that stopped before step 1 stopped.

The run page's script (``static/js/run_time.js``) keeps the first of these current
without a reload, from :func:`clock_data` in its page data: the threshold is
:func:`dashboard.reads.runs.quiet_window_s`, never a second constant.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from dashboard.models import FINAL_STATUSES, UNFINISHED_STATUSES, Run, RunStatus
from dashboard.reads import runs as run_reads

# How often the run and home pages compare the time since an external run's last
# event with the threshold (a comparison of two numbers: cheap). Rendered as the
# pages' ``data-quiet-check-ms``, where a test reads how long a switch may take.
QUIET_CHECK_MS = 1000
NOT_SENDING = "not sending"  # the pages' one word for it (run page, lists, home)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 alert``, ``2 alerts``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def clock_data(run: Run, duration_s: float | None) -> dict[str, Any]:
    """The run page's figures for its clock (``static/js/run_time.js``): the wall
    time at render (``dashboard.reads.runs.duration_s``), and for an external run
    the seconds since its last event and the threshold after which it is not
    sending (:func:`~dashboard.reads.runs.quiet_window_s`); the run's age (its
    "created ... ago", kept current)."""
    age = None
    if run.external and run.heartbeat_at:  # a lost one's too: it may come back
        age = max(0.0, (timezone.now() - run.heartbeat_at).total_seconds())
    return {
        "external": run.external,
        "duration_s": duration_s,
        "event_age_s": age,
        "created_age_s": max(0.0, (timezone.now() - run.created_at).total_seconds()),
        "quiet_after_s": run_reads.quiet_window_s(),
        "quiet_check_ms": QUIET_CHECK_MS,
    }


def with_quiet(rows: list[Run]) -> list[Run]:
    """Each row with ``quiet_for`` (:func:`~dashboard.reads.runs.quiet_for_s`): the
    runs tables say "not sending" under a running external run gone quiet."""
    for r in rows:
        r.quiet_for = run_reads.quiet_for_s(r)
    return rows


def status_counts(runs: QuerySet[Run], limit: int = 5000) -> dict[str, int]:
    """The home page's counts per status, a running external run that is not
    sending counted under :data:`NOT_SENDING` instead of ``running``."""
    counts = {s: 0 for s in RunStatus.values}
    for status in runs.values_list("status", flat=True)[:limit]:
        counts[status] = counts.get(status, 0) + 1
    quiet = runs.filter(run_reads.not_sending()).count()
    counts[RunStatus.RUNNING] = max(0, counts[RunStatus.RUNNING] - quiet)
    out: dict[str, int] = {}
    for status, n in counts.items():  # "not sending" right after "running"
        out[status] = n
        if status == RunStatus.RUNNING:
            out[NOT_SENDING] = quiet
    return out


def home_banner_quiet_in_s(run: Run | None) -> float | None:
    """Seconds until the home page's "Receiving now" run would be not sending if
    nothing more came (the page asks the server again then); None for ours."""
    age = run_reads.event_age_s(run) if run is not None else None
    return None if age is None else max(0.0, run_reads.quiet_window_s() - age)


def stopped_before_step_1(run: Run) -> str:
    """What an empty chart of a run that ended in its warm start says ("" for any
    other run); ``static/js/run_page.js`` says the same when it ends while open."""
    warm = run.warmup if isinstance(run.warmup, dict) else {}
    if run.status in UNFINISHED_STATUSES or run.last_step or not warm.get("of"):
        return ""
    return (
        f"Stopped at warm start {warm.get('done', 0)} of {warm['of']} ({run.status}): "
        "no RL step ran, so nothing was charted."
    )


def charts_waiting(run: Run, metric_keys: list[str]) -> str:
    """The one notice the run page shows in place of its charts while it has no
    metric to chart: queued, warming up, or ended before step 1 ("" otherwise).
    ``static/js/run_waiting.js`` (``waitingChartText``) says the same as the run
    moves on, and brings the charts back with its first step."""
    if metric_keys:
        return ""
    warm = run.warmup if isinstance(run.warmup, dict) else {}
    last = run.last_step
    if run.status == RunStatus.QUEUED:
        if last:
            return (
                f"Queued after step {last}: nothing recorded here yet; the run goes "
                "on when it starts again."
            )
        return "Queued: charts begin at step 1, once the run starts."
    if run.status == RunStatus.RUNNING and not last:
        if warm.get("of"):
            return (
                f"Warm start {warm.get('done', 0)} of {warm['of']}: charts begin at "
                "step 1."
            )
        return "Starting: charts begin at step 1."
    if run.status in FINAL_STATUSES and not last:
        if warm.get("of"):
            return stopped_before_step_1(run)
        if run.status != RunStatus.SUCCEEDED:
            return (
                f"Stopped before step 1 ({run.status}): no RL step ran, so nothing "
                "was charted."
            )
    return ""


def with_stopped_text(charts: list[dict[str, Any]], run: Run) -> list[dict[str, Any]]:
    """``charts`` whose "No data yet." says :func:`stopped_before_step_1` instead."""
    text = stopped_before_step_1(run)
    if text:
        for c in charts:
            if c.get("empty") in (None, "", "No data yet."):
                c["empty"] = text
    return charts


def sent_line(run: Run, metric_keys: list[str], recording: str) -> str:
    """The run page's line on what was recorded, for an external run with no
    trajectories stored: unless some were pruned, what it sent instead of a recording
    policy that had nothing to apply to; nothing when it sent nothing."""
    pruned = run.pruned if isinstance(run.pruned, dict) else {}
    if not run.external or pruned.get("trajectories_deleted"):
        return recording
    series = [k for k in metric_keys if not k.startswith("system/")]
    system = len(metric_keys) - len(series)
    sent = []
    if series:
        sent.append(plural(len(series), "metric"))
    if system:
        sent.append(plural(system, "system metric"))
    return f"Sent: {' and '.join(sent)}, no trajectories." if sent else ""
