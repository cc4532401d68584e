"""A task's history pages (issue 12.3): one task followed across a run's steps, and
the same task in several runs side by side (from compare). Thin: read
(:mod:`dashboard.reads.history`), render; the chart's series travel in a
``json_script`` block and the task id (untrusted, from the environment or a
trainer) is escaped wherever it appears."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from dashboard import jsonsafe
from dashboard.pages.csp import csp
from dashboard.reads import history as task_reads
from dashboard.runs import services

SERIES_LABELS = {
    "mean_reward": "group mean reward",
    "best_reward": "best reward",
    "advantage_max": "largest advantage",
    "advantage_min": "smallest advantage",
}


@csp
def task_history(request: HttpRequest, run_id: Any, task_id: str) -> HttpResponse:
    run = services.get_run_for_user(request.user, run_id)
    # A task id no stored trajectory can hold (NUL: PostgreSQL text cannot) has none.
    history = (
        [] if jsonsafe.text_problem(task_id) else task_reads.task_history(run, task_id)
    )
    if not history:
        raise Http404("no recorded rollout of this task in this run")
    page_data = {
        "steps_url": reverse("pages:trajectories", args=[run.pk]),
        "charts": [
            {
                "id": "task",
                "keys": list(SERIES_LABELS),
                "labels": list(SERIES_LABELS.values()),
                "series": task_reads.series(history),
            }
        ],
    }
    return render(
        request,
        "pages/task.html",
        {
            "run": run,
            "task_id": task_id,
            "history": history[::-1],  # newest first in the table
            "recorded_steps": len({h.step for h in history}),
            "prompt": task_reads.task_prompt(run, task_id),
            "page_data": page_data,
        },
    )


@csp
def compare_task(request: HttpRequest) -> HttpResponse:
    """``?runs=a,b&task=t``: the task's history in each run, the mean rewards on one
    chart."""
    from dashboard.pages.views import COMPARE_MAX, COMPARE_MIN, _compare_ids

    ids = _compare_ids(request)
    task_id = request.GET.get("task", "")
    error = ""
    if not COMPARE_MIN <= len(ids) <= COMPARE_MAX:
        error = f"runs: pick between {COMPARE_MIN} and {COMPARE_MAX} runs."
    elif not task_id:
        error = "task: pick a task id from the compare page."
    elif problem := jsonsafe.text_problem(task_id):
        error = f"task: {problem}"
    if error:
        return render(request, "pages/compare_task.html", {"error": error}, status=400)
    runs = [services.get_run_for_user(request.user, i) for i in ids]
    columns, keys, labels, series = [], [], [], {}
    for n, run in enumerate(runs):
        history = task_reads.task_history(run, task_id)
        columns.append({"run": run, "history": history[::-1]})
        key = f"run{n}"
        keys.append(key)
        labels.append(f"{run.name}: group mean reward")
        series[key] = task_reads.series(history)["mean_reward"]
    page_data = {
        "charts": [{"id": "task", "keys": keys, "labels": labels, "series": series}]
    }
    return render(
        request,
        "pages/compare_task.html",
        {
            "runs": runs,
            "task_id": task_id,
            "columns": columns,
            "page_data": page_data,
            "compare_url": reverse("pages:compare")
            + "?"
            + urlencode({"runs": ",".join(str(r.pk) for r in runs), "task": task_id}),
        },
    )
