"""The compare page: ``/compare/?runs=a,b[,c...]`` (2-8 runs).

Summary, config diff, overlaid charts and the same task in each run. What it adds to
a plain read of the runs:

* **Tasks shared by some of the runs.** With three runs or more, when no task is
  sampled by every run (a calc run beside two swarm runs of one seed), the tasks that
  two or more of them share are listed by the set of runs that share them
  (:func:`task_groups`); "share no task" only when no two runs share one.
* **Live.** ``?part=summary`` renders the summary table alone: the page's script
  (``static/js/compare_live.js``) asks for it while a run is live and refreshes the
  live runs' lines on the charts.
* **Charts in the URL.** ``&charts=key1,key2`` (:func:`chart_keys`): the charts the
  page opens with, so a comparison can be shared; unknown keys are left out with a
  notice.
* **Metrics by meaning.** A chart of ``lr`` draws a TRL run's ``learning_rate`` (and
  the other way round): each run's line is read from the key of that run that means
  the same, by the one table of metric names, :mod:`trainer.metric_names`
  (:func:`metric_sources`); the legend names the key each line came from.
* **One colour per run**, whatever the order of ``runs`` (:func:`colour_slots`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import urlencode

from dashboard import jsonsafe
from dashboard.library import roots
from dashboard.models import Run
from dashboard.pages import compare_picker, configdiff, run_state
from dashboard.pages.csp import csp
from dashboard.pages.forms import normalise
from dashboard.pages.views import COMPARE_MAX, COMPARE_MIN, _compare_ids, run_info
from dashboard.reads import metrics, reward_names
from dashboard.reads import runs as run_reads
from dashboard.reads import trajectories as trajs
from dashboard.runs import services
from trainer import metric_names

MAX_CHARTS = 12  # charts a URL may open (each one a metrics request per run)
TASKS_PER_GROUP = 50
MAX_GROUPS = 10
LIVE_EVERY_MS = 5000  # how often the page asks for the summary while a run is live
SHOWN_KEY = 80  # characters of an unknown chart key the notice repeats


@csp
def compare(request: HttpRequest) -> HttpResponse:
    ids = _compare_ids(request)
    if not COMPARE_MIN <= len(ids) <= COMPARE_MAX:  # the runs to pick, as on the list
        ctx = {"error": compare_picker.message(ids), "runs": []}
        ctx.update(compare_picker.picker(request.user, ids))
        return render(request, "compare.html", ctx, status=400 if ids else 200)
    problem = jsonsafe.text_problem(request.GET.get("task") or "")
    if problem:  # no stored task id holds one (PostgreSQL text cannot)
        error = f"task: {problem}"
        return render(request, "compare.html", {"error": error, "runs": []}, status=400)
    runs = run_state.with_quiet(
        [services.get_run_for_user(request.user, i) for i in ids]
    )
    rewards = reward_names.reward_keys(runs)
    summary = _summary(runs, rewards)
    if request.GET.get("part") == "summary":  # the live refresh (compare_live.js)
        return render(
            request,
            "pages/partials/compare_summary.html",
            {"summary": summary, "live_every_ms": LIVE_EVERY_MS},
        )
    # An external run's config is its trainer's: no defaults of ours to spell out.
    # Paths as the form names them (no server path on a page): roots.shown_paths.
    comparison = configdiff.compare(
        [
            r.config if r.external else roots.shown_paths(normalise(r.config))
            for r in runs
        ]
    )
    logged = {r.pk: set(metrics.metric_keys(r)) for r in runs}
    every = set().union(*logged.values())
    if every & set(rewards.values()):  # each run's reward, whatever its name
        every.add(reward_names.REWARD)
    keys = sorted(every) or [reward_names.REWARD]
    sources = metric_sources(runs, logged, rewards, keys)
    # The metric list offers each meaning once (our name): a chart of TRL's
    # learning_rate is the lr chart (both names still open it from the URL).
    options = [k for k in keys if k not in _aliases(runs, logged, rewards)]
    default_key = reward_names.REWARD if reward_names.REWARD in keys else keys[0]
    # Held-out evaluation overlaid too, when a run has it (trainer.evaluate).
    extra_keys = [k for k in ("eval/reward", "eval/pass@k") if k in keys]
    defaults = [default_key, *extra_keys]
    charts, chart_notice = chart_keys(request.GET.getlist("charts"), keys, defaults)
    firsts = [trajs.task_firsts(r) for r in runs]
    groups = task_groups(runs, firsts)
    tasks = [t for g in groups for t in g.tasks]
    task = request.GET.get("task") or (tasks[0] if tasks else "")
    # The runs that sampled the task; one or none (a task asked for by hand): all,
    # each saying whether it did.
    shown = [r for r, f in zip(runs, firsts, strict=True) if task in f]
    shown = shown if len(shown) >= 2 else list(runs)
    slots = colour_slots(runs)
    page_data = {
        "runs": [
            {
                "id": str(r.pk),
                "name": r.name,
                "metrics_url": f"/api/runs/{r.pk}/metrics",
                "colour": slots[r.pk],
                # chart key -> the key of this run it is read from, where they differ
                "sources": sources[r.pk],
            }
            for r in runs
        ],
        "keys": keys,
        "default_key": default_key,
        "extra_keys": extra_keys,
        "default_charts": defaults,
        "charts": charts,
    }
    return render(
        request,
        "compare.html",
        {
            "runs": runs,
            "summary": summary,
            "live_every_ms": LIVE_EVERY_MS,
            "diff": comparison.rows,
            "reward_differs": reward_differs(comparison.rows, runs),
            "matched": comparison.matched,  # another framework's settings lined up
            "other_keys": comparison.other,  # only in some configs: folded
            "keys": options,
            "charts_param": ",".join(charts) if request.GET.getlist("charts") else None,
            "chart_notice": chart_notice,
            "tasks": tasks,
            "task_groups": groups,
            # no task every run sampled: the groups are subsets of the runs
            "partial": bool(groups) and len(groups[0].runs) < len(runs),
            "task": task,
            "task_runs": shown,
            "task_missing": [r for r in runs if r not in shown],
            "side_by_side": trajs.task_trajectories(shown, task) if task else [],
            # Runs with no step recorded share no task for a plainer reason.
            "unstarted": [r for r in runs if not r.last_step],
            "task_query": urlencode(
                {"runs": ",".join(str(r.pk) for r in shown), "task": task}
            ),
            "page_data": page_data,
            "ids": ",".join(str(r.pk) for r in runs),
        },
    )


def reward_differs(rows: Sequence[Any], runs: Sequence[Run]) -> list[str]:
    """The reward components the runs do not share alike (weight, schedule,
    parameters, or present in some only), from our runs' config differences: their
    reward totals are then on different scales (a walk ranked a run whose outcome
    weighed 2 above one whose outcome weighed 1). External runs' configs are their
    trainers' and say nothing we can read of it."""
    if any(r.external for r in runs):
        return []
    prefix = "reward.components."
    paths = [str(row.path) for row in rows]
    names = [p[len(prefix) :].split(".")[0] for p in paths if p.startswith(prefix)]
    return list(dict.fromkeys(names))  # each once, in the table's order


# A finished run's row of numbers, by what would change it: the page polls the
# summary every few seconds while one of its runs is live, and the others' numbers
# (reads over every reward point of each) are the same each time.
_ENDED_ROWS: OrderedDict[tuple, tuple] = OrderedDict()
MAX_ENDED_ROWS = 512


def _numbers(runs: Sequence[Run], rewards: dict[Any, str]) -> dict[Any, tuple]:
    """(stats, best reward, alerts) of each run, a finished one's remembered."""
    out, todo = {}, []
    for r in runs:
        key = (r.pk, r.status, r.last_step, r.heartbeat_at, rewards[r.pk])
        if not r.is_active and key in _ENDED_ROWS:
            out[r.pk] = _ENDED_ROWS[key]
        else:
            todo.append((r, key))
    ids = [r.pk for r, _ in todo]
    best = metrics.best_rewards(ids, rewards) if ids else {}
    alerts = run_reads.alert_counts(ids) if ids else {}
    for r, key in todo:
        row = (
            run_reads.run_stats(r, rewards[r.pk]),
            best.get(r.pk),
            alerts.get(r.pk, 0),
        )
        out[r.pk] = row
        if not r.is_active:
            _ENDED_ROWS[key] = row
            if len(_ENDED_ROWS) > MAX_ENDED_ROWS:
                _ENDED_ROWS.popitem(last=False)
    return out


def _summary(runs: Sequence[Run], rewards: dict[Any, str]) -> list[dict[str, Any]]:
    numbers = _numbers(runs, rewards)
    return [
        {
            "run": r,
            "info": run_info(r),
            "stats": numbers[r.pk][0],
            "best": numbers[r.pk][1],
            "alerts": numbers[r.pk][2],
            # queued, training or receiving events: the page follows it
            "live": r.is_active and not r.quiet_for,
        }
        for r in runs
    ]


# --- colours -------------------------------------------------------------------------


def colour_slots(runs: Sequence[Run]) -> dict[Any, int]:
    """Each run's place in the chart palette: its rank among the selected runs by
    creation (then id), so the order of ``?runs=`` does not repaint a run; 2-8 runs
    and 8 colours, no two alike."""
    ranked = sorted(runs, key=lambda r: (r.created_at, str(r.pk)))
    return {r.pk: i for i, r in enumerate(ranked)}


# --- charts in the URL ---------------------------------------------------------------


def chart_keys(
    raw: Iterable[str], keys: Sequence[str], defaults: list[str]
) -> tuple[list[str], str]:
    """The charts to open and a notice ("" when none): ``raw`` is ``?charts=``'s
    values (comma-separated keys, the parameter may repeat). Absent: ``defaults``;
    present and empty: no chart (every chart removed). Keys no selected run logged
    are left out, and past :data:`MAX_CHARTS`; nothing is left of a non-empty list:
    the defaults."""
    raw = list(raw)
    if not raw:
        return defaults, ""
    known = set(keys)
    # A value that is a key whole is one (a key may hold a comma: the page writes
    # such a key as a parameter of its own).
    wanted = list(
        dict.fromkeys(
            p.strip()
            for value in raw
            for p in ([value] if value in known else value.split(","))
            if p.strip()
        )
    )
    found = [k for k in wanted if k in known]
    unknown = [k for k in wanted if k not in known]
    notes = []
    if unknown:
        listed = ", ".join(_shown_key(k) for k in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        notes.append(
            f"Not charted: {listed}{more} (no selected run logged "
            f"{'it' if len(unknown) == 1 else 'them'})."
        )
    if len(found) > MAX_CHARTS:
        notes.append(f"Only the first {MAX_CHARTS} of {len(found)} charts are shown.")
        found = found[:MAX_CHARTS]
    if wanted and not found:
        found = defaults
    return found, " ".join(notes)


def _shown_key(key: str) -> str:
    """A key from the URL as the notice repeats it: characters that print, cut."""
    text = "".join(c if c.isprintable() else "\ufffd" for c in key)
    return text if len(text) <= SHOWN_KEY else text[: SHOWN_KEY - 1] + "\u2026"


# --- the same metric under each trainer's name -----------------------------------------


def _aliases(
    runs: Sequence[Run], logged: dict[Any, set[str]], rewards: dict[Any, str]
) -> set[str]:
    """A trainer's names of the metrics that have one of ours (its reward key too)."""
    out = set()
    for r in runs:
        for k in logged[r.pk]:
            name = metric_names.ours(r.framework, k) or k
            if k == rewards[r.pk] or name != k:
                out.add(k)
    return out - {reward_names.REWARD}


def metric_sources(
    runs: Sequence[Run],
    logged: dict[Any, set[str]],
    rewards: dict[Any, str],
    keys: Iterable[str],
) -> dict[Any, dict[str, str]]:
    """Per run, ``{chart key: the key of this run it is read from}`` for the keys the
    run did not log under that name but under another of the same meaning: our name
    for each of a run's keys is :func:`trainer.metric_names.ours` (its framework's
    table: TRL's ``learning_rate`` is our ``lr``), and a run's reward is read where
    :func:`~dashboard.reads.reward_names.reward_keys` found it. A chart of either
    name draws both runs; a key the run logged itself is read as it is."""
    ours: dict[Any, dict[str, str]] = {}
    meaning: dict[str, str] = {}  # a trainer's name -> ours
    for r in runs:
        mine = {k: metric_names.ours(r.framework, k) or k for k in sorted(logged[r.pk])}
        if rewards[r.pk] in mine:
            mine[rewards[r.pk]] = reward_names.REWARD
        ours[r.pk] = mine
        for theirs, name in mine.items():
            if name != theirs:
                meaning.setdefault(theirs, name)
    out: dict[Any, dict[str, str]] = {}
    for r in runs:
        by_meaning: dict[str, str] = {}
        for theirs, name in ours[r.pk].items():
            by_meaning.setdefault(name, theirs)
        found = {}
        for key in keys:
            if key in logged[r.pk]:
                continue
            name = meaning.get(key, key)
            source = name if name in logged[r.pk] else by_meaning.get(name)
            if source and source != key:
                found[key] = source
        out[r.pk] = found
    return out


# --- tasks shared by all runs, or by some ----------------------------------------------


@dataclass
class TaskGroup:
    """Tasks sampled by exactly ``runs`` among the selected runs (``others``: the
    selected runs that sampled none of them)."""

    runs: list[Run]
    tasks: list[str]
    others: list[Run] = field(default_factory=list)
    count: int = 0  # tasks in the group (``tasks`` holds the first few)


def task_groups(
    runs: Sequence[Run], firsts: Sequence[dict[str, int]]
) -> list[TaskGroup]:
    """The tasks two or more of ``runs`` sampled (``firsts``: each run's
    :func:`dashboard.reads.trajectories.task_firsts`), grouped by which runs sampled
    them. Tasks every run sampled: that group
    alone (as before). Else one group per set of runs, the larger sets first, then
    those sharing more tasks; each group's tasks earliest first. Empty: no two runs
    share a task."""
    first_step: dict[str, int] = {}
    sharers: dict[str, list[int]] = {}
    for i, f in enumerate(firsts):
        for task, step in f.items():
            sharers.setdefault(task, []).append(i)
            first_step[task] = min(step, first_step.get(task, step))
    by_set: dict[tuple[int, ...], list[str]] = {}
    for task, who in sharers.items():
        if len(who) >= 2:
            by_set.setdefault(tuple(who), []).append(task)
    everyone = tuple(range(len(runs)))
    if everyone in by_set:
        by_set = {everyone: by_set[everyone]}
    order = sorted(by_set, key=lambda s: (-len(s), -len(by_set[s]), s))
    groups = []
    for who in order[:MAX_GROUPS]:
        tasks = sorted(by_set[who], key=lambda t: (first_step[t], t))
        groups.append(
            TaskGroup(
                runs=[runs[i] for i in who],
                tasks=tasks[:TASKS_PER_GROUP],
                others=[r for i, r in enumerate(runs) if i not in who],
                count=len(tasks),
            )
        )
    return groups
