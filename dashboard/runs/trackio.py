"""trackio's calls, mapped onto external runs (``docs/trackio.md``).

A trackio *project* is a run group (``Run.group``), a trackio *run* (its ``run_id``,
else its name within the project) an external run of the caller, created by its first
entry with the framework its config says (:func:`trainer.importers.trackio.
detect_framework`). Entries become our events (:mod:`trainer.importers.trackio`, pure)
and are stored by :func:`dashboard.runs.external.do_ingest_events`, the write path of
every external run: the recording policy, the detectors, rollups and frames.

A call is all or nothing: every entry is converted and checked against the event
schema before anything is written, and a bad one refuses the call naming it
(``logs[3].metrics.reward: ...``). An entry whose ``log_id`` (``alert_id``) was stored
before is a duplicate (:class:`~dashboard.models.EntryReceipt`), so the client's
re-sends of a batch it thought failed change nothing.

What a call must never be is a 500: trackio's client sends a batch answered 500 again,
forever. An entry's text is repaired as stored text is (:func:`dashboard.jsonsafe.
clean`: a lone surrogate becomes ``?``), except the names and the config, which are
refused when unstorable (:func:`~dashboard.runs.services.check_text`); a value of a
shape the client never sends is refused by its path (``logs[0].metrics.rollout.
messages: ...``); and an entry no check foresaw failing refuses its call, the error's
type in the log.

Views know nothing of this: ``dashboard.api.trackio`` parses the HTTP shape and calls
the ``do_*`` and read functions here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from dashboard import jsonsafe
from dashboard.models import EntryReceipt, MetricPoint, Run, Trajectory, metric_keys
from dashboard.runs import external, resent_tables
from dashboard.runs.event_body import check_metric_values
from dashboard.runs.services import InvalidConfig, ServiceError, check_name, check_text
from trainer.importers import completions
from trainer.importers import trackio as convert

MAX_ID = 64
# Checked and refused when unstorable; the rest of an entry is data, repaired.
CHECKED_KEYS = ("project", "run", "run_id", "config")
log = logging.getLogger(__name__)


# --- checking the entries -------------------------------------------------------------
def check_entries(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InvalidConfig(f"{field}: must be a list of entries")
    if len(value) > settings.TRACKIO_MAX_ENTRIES:
        raise InvalidConfig(
            f"{field}: {len(value)} entries, more than {settings.TRACKIO_MAX_ENTRIES}"
        )
    errors = [
        f"{field}[{i}]: must be an object"
        for i, entry in enumerate(value)
        if not isinstance(entry, dict)
    ]
    if errors:
        raise InvalidConfig(errors[: external.MAX_ERRORS])
    return [
        {k: v if k in CHECKED_KEYS else jsonsafe.clean(v) for k, v in entry.items()}
        for entry in value
    ]


@contextlib.contextmanager
def _importing(where: str) -> Iterator[None]:
    """Converting the entry at ``where``: a shape the converter refuses, or a failure
    no check foresaw (logged with its type), refuses the call naming the entry."""
    try:
        yield
    except ServiceError:
        raise
    except convert.BadEntry as exc:
        raise InvalidConfig(f"{where}.{exc}") from None
    except Exception as exc:
        log.exception("trackio: %s not imported (%s)", where, type(exc).__name__)
        raise InvalidConfig(
            f"{where}: could not be imported ({type(exc).__name__}); the server log "
            "has the details"
        ) from None


def _optional_id(entry: dict[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID:
        raise InvalidConfig(f"{where}.{key}: must be a string of 1 to {MAX_ID} chars")
    return check_text(f"{where}.{key}", value)


def check_project(value: Any, where: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= 200:
        raise InvalidConfig(f"{where}.project: must be a string of 1 to 200 characters")
    return check_text(f"{where}.project", value.strip())


def _run_key(entry: dict[str, Any], where: str) -> tuple[str, str, str | None]:
    project = check_project(entry.get("project"), where)
    try:
        name = check_name(entry.get("run"))
    except ServiceError as exc:
        raise InvalidConfig(
            f"{where}.run: {exc.errors[0].partition(': ')[2]}"
        ) from None
    if name is None:
        raise InvalidConfig(f"{where}.run: required (the run's name)")
    return project, name, _optional_id(entry, "run_id", where)


def _by_run(
    entries: list[dict[str, Any]], field: str
) -> dict[tuple[str, str, str | None], list[tuple[str, dict[str, Any]]]]:
    """The entries of each run, in order, each with where it was (``logs[3]``);
    refused when the call reports to more runs, or carries more metric values or
    trajectories, than a request may store (``TRACKIO_MAX_RUNS``,
    ``EVENTS_MAX_METRIC_VALUES``, ``TRACKIO_MAX_TRAJECTORIES``: each bounds how long
    the call holds the embedded database's write lock)."""
    out: dict[tuple[str, str, str | None], list[tuple[str, dict[str, Any]]]] = {}
    for i, entry in enumerate(entries):
        where = f"{field}[{i}]"
        out.setdefault(_run_key(entry, where), []).append((where, entry))
    if len(out) > settings.TRACKIO_MAX_RUNS:
        raise InvalidConfig(
            f"{field}: entries for {len(out)} runs, more than the limit of "
            f"{settings.TRACKIO_MAX_RUNS} a call (TRACKIO_MAX_RUNS)"
        )
    metrics = [e["metrics"] for e in entries if isinstance(e.get("metrics"), dict)]
    check_metric_values(sum(map(len, metrics)), field, InvalidConfig)
    rows = sum(_trajectories_in(v) for m in metrics for v in m.values())
    if rows > settings.TRACKIO_MAX_TRAJECTORIES:
        raise InvalidConfig(
            f"{field}: {rows:,} table rows and traces, more than the limit of "
            f"{settings.TRACKIO_MAX_TRAJECTORIES:,} a call (TRACKIO_MAX_TRAJECTORIES)"
        )
    return out


def _trajectories_in(value: Any) -> int:
    """The trajectories a logged value unfolds into: a table's rows, its traces."""
    if convert.is_table(value):
        rows = value.get("_value")
        return len(rows) if isinstance(rows, list) else 0
    return len(convert.traces_in(value))


def _checked(events: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    from trainer.event_schema import EventError, check_event

    for event in events:
        try:
            check_event(event)
        except (EventError, RecursionError) as exc:
            raise InvalidConfig(f"{where}: {exc}") from None
    return events


# --- the run of an entry --------------------------------------------------------------
def _find_run(user: Any, project: str, name: str, run_id: str | None) -> Run | None:
    runs = Run.objects.filter(owner=user, external=True)
    if run_id is not None:
        return runs.filter(external_id=run_id).first()
    return runs.filter(group=project, name=name).order_by("-created_at").first()


def run_for(
    user: Any, key: tuple[str, str, str | None], config: Any, where: str
) -> Run:
    """The caller's run of this trackio run, created (in its project's group) if new;
    a config arriving later fills the empty config of a run created without one."""
    project, name, run_id = key
    cfg = convert.trainer_config(config) if isinstance(config, dict) else None
    try:
        checked = None if cfg is None else external.check_external_config(cfg)
    except ServiceError as exc:
        raise InvalidConfig([f"{where}.{e}" for e in exc.errors]) from None
    run = _find_run(user, project, name, run_id)
    if run is None:
        try:
            with transaction.atomic():
                run = external.do_create_external_run(
                    user,
                    name=name,
                    framework=convert.detect_framework(checked),
                    config=checked,
                )
                run.group, run.external_id = project, run_id or ""
                run.save(update_fields=["group", "external_id"])
        except IntegrityError:  # a concurrent first entry of the same run won
            run = _find_run(user, project, name, run_id)
            if run is None:
                raise
        except ServiceError as exc:  # EXTERNAL_RUNS_MAX_PER_USER: the call is refused
            raise InvalidConfig([f"{where}.run: {e}" for e in exc.errors]) from None
    elif checked and not run.config:
        run.config = checked
        if run.framework == "trackio":
            run.framework = convert.detect_framework(checked)
        run.save(update_fields=["config", "framework"])
    return run


def _fresh(
    run: Run, items: list[tuple[str, dict[str, Any]]], id_key: str
) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """The entries not stored before (by their ``id_key``), their receipts written;
    and how many were duplicates."""
    keyed = [(where, e, _optional_id(e, id_key, where)) for where, e in items]
    ids = [key for _, _, key in keyed if key is not None]
    seen = set(
        EntryReceipt.objects.filter(run=run, key__in=ids).values_list("key", flat=True)
    )
    fresh, new_ids = [], []
    for where, entry, key in keyed:
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
            new_ids.append(key)
        fresh.append((where, entry))
    EntryReceipt.objects.bulk_create(
        [EntryReceipt(run=run, key=k) for k in new_ids], ignore_conflicts=True
    )
    return fresh, len(items) - len(fresh)


def _taken(run: Run, steps: Iterable[int]) -> dict[int, convert.Slots]:
    rows = Trajectory.objects.filter(run=run, step__in=set(steps))
    taken: dict[int, convert.Slots] = {}
    for step, group, index, task in rows.values_list(
        "step", "group", "index", "task_id"
    ):
        taken.setdefault(step, convert.Slots()).add(group, index, task)
    return taken


def _store(run: Run, events: list[dict[str, Any]], duplicates: int) -> dict[str, int]:
    if not events:
        return {"accepted": 0, "duplicates": duplicates}
    if run.status in external.FINISH_STATUSES:
        # trackio's client has neither a finish nor a reopen call: new entries for a
        # run finished here (``POST /api/runs/<id>/finish``) are that run resumed.
        run = external.do_reopen_external_run(run, run.owner)
    result = external.do_ingest_events(run, events)
    return {
        "accepted": result["accepted"],
        "duplicates": result["duplicates"] + duplicates,
    }


def _add(total: dict[str, int], part: dict[str, int]) -> dict[str, int]:
    return {k: total.get(k, 0) + v for k, v in part.items()}


# --- the calls ------------------------------------------------------------------------
def _step(entry: dict[str, Any], run: Run, where: str, last: int | None = None) -> int:
    """The entry's step; without one, the step after ``last`` (the call's latest
    step so far), else after the run's."""
    step = entry.get("step")
    if step is None:
        return (run.last_step if last is None else last) + 1
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**31:
        raise InvalidConfig(f"{where}.step: must be a whole number from 0 to 2**31 - 1")
    return step


def _log_events(run: Run, items: list[tuple[str, dict[str, Any]]]) -> list[dict]:
    weights = (run.config or {}).get("reward_weights") if run.config else None
    if not (isinstance(weights, list) and all(convert.number(w) for w in weights)):
        weights = None
    for where, entry in items:
        if not isinstance(entry.get("metrics"), dict):
            raise InvalidConfig(f"{where}.metrics: must be an object")
    logged = _logged_rewards(run, [entry["metrics"] for _, entry in items])
    per_entry = []
    last = run.last_step
    for where, entry in items:
        # Entries without a step follow each other (three in one call were all
        # the run's next step: two of them dropped as that step's re-sends).
        step = _step(entry, run, where, last)
        last = max(last, step)
        with _importing(where):
            evs = convert.entry_events(
                entry["metrics"], step, run.framework, weights=weights, logged=logged
            )
        per_entry.append((where, evs))
    per_entry, _ = resent_tables.drop_resent(run, per_entry)
    unplaced = {
        ev["step"]
        for _, evs in per_entry
        for ev in evs
        if ev["type"] == "trajectory" and (ev["group"] is None or ev["index"] is None)
    }
    taken = _taken(run, unplaced) if unplaced else {}
    events = []
    for where, evs in per_entry:
        with _importing(where):
            events.extend(_checked(convert.place(evs, taken), where))
    return events


def _logged_rewards(run: Run, entries: list[dict[str, Any]]) -> set[str]:
    """The reward functions' names TRL logged (``rewards/<name>/mean``), in this call
    or stored before, read only when a completions table needs them."""
    tables = any(convert.is_table(v) for metrics in entries for v in metrics.values())
    if not tables:
        return set()
    names = [key for metrics in entries for key in metrics]
    return completions.logged_rewards([*names, *metric_keys(run)])


def do_bulk_log(user: Any, logs: Any) -> dict[str, int]:
    """trackio's ``bulk_log``: metrics, tables and traces of any number of runs."""
    total: dict[str, int] = {"accepted": 0, "duplicates": 0}
    with transaction.atomic():
        for key, items in _by_run(check_entries(logs, "logs"), "logs").items():
            config = next((e["config"] for _, e in items if e.get("config")), None)
            run = run_for(user, key, config, items[0][0])
            fresh, dups = _fresh(run, items, "log_id")
            total = _add(total, _store(run, _log_events(run, fresh), dups))
    return total


def do_log(user: Any, entry: dict[str, Any]) -> dict[str, int]:
    """trackio's single-entry ``log`` (project, run, metrics, step, run_id)."""
    return do_bulk_log(user, [entry])


def _system_events(run: Run, items: list[tuple[str, dict[str, Any]]]) -> list[dict]:
    """System samples as ``system/<name>`` metrics at the run's current step: the
    first sample of a name at a step is kept (a step holds one value a name)."""
    step = run.last_step
    have = set(
        MetricPoint.objects.filter(
            run=run, step=step, key__startswith="system/"
        ).values_list("key", flat=True)
    )
    events = []
    for where, entry in items:
        metrics = entry.get("metrics")
        if not isinstance(metrics, dict):
            raise InvalidConfig(f"{where}.metrics: must be an object")
        with _importing(where):
            values = {
                f"system/{k}": convert.number(v)
                for k, v in metrics.items()
                if convert.number(v) is not None and f"system/{k}" not in have
            }
            have.update(values)
            if values:
                event = {"type": "step", "step": step, "metrics": values}
                events.extend(_checked([event], where))
    return events


def do_bulk_log_system(user: Any, logs: Any) -> dict[str, int]:
    """trackio's ``bulk_log_system`` (CPU, GPU, memory samples without a step)."""
    total: dict[str, int] = {"accepted": 0, "duplicates": 0}
    with transaction.atomic():
        for key, items in _by_run(check_entries(logs, "logs"), "logs").items():
            run = run_for(user, key, None, items[0][0])
            fresh, dups = _fresh(run, items, "log_id")
            total = _add(total, _store(run, _system_events(run, fresh), dups))
    return total


def do_bulk_alert(user: Any, alerts: Any) -> dict[str, int]:
    """trackio's ``bulk_alert``: alerts the trainer raised (``trackio.alert``)."""
    total: dict[str, int] = {"accepted": 0, "duplicates": 0}
    with transaction.atomic():
        for key, items in _by_run(check_entries(alerts, "alerts"), "alerts").items():
            run = run_for(user, key, None, items[0][0])
            fresh, dups = _fresh(run, items, "alert_id")
            events = []
            for where, entry in fresh:
                step = _step(entry, run, where)
                with _importing(where):
                    event = convert.alert_event(entry, step)
                    events.extend(_checked([event], where))
            total = _add(total, _store(run, events, dups))
    return total


# --- what the client reads back -------------------------------------------------------
def runs_of_project(user: Any, project: Any) -> list[dict[str, Any]]:
    """``get_runs_for_project``: the caller's runs of the group, as trackio's records."""
    project = check_project(project, "kwargs")
    runs = Run.objects.filter(owner=user, external=True, group=project).order_by(
        "created_at"
    )
    return [
        {
            "id": run.external_id or str(run.pk),
            "name": run.name,
            "group": run.group,
            "created_at": run.created_at.isoformat(),
        }
        for run in runs
    ]


def run_summary(
    user: Any, project: Any, run: Any = None, run_id: Any = None
) -> dict[str, Any]:
    """``get_run_summary``: enough for ``init(resume=...)``: the run's last step."""
    project = check_project(project, "kwargs")
    found = None
    if isinstance(run_id, str) and run_id:
        found = Run.objects.filter(owner=user, external_id=run_id).first()
    elif isinstance(run, str) and run:
        found = _find_run(user, project, run.strip(), None)
    if found is None:
        return {
            "project": project,
            "run": run,
            "run_id": run_id,
            "num_logs": 0,
            "metrics": [],
            "config": None,
            "last_step": None,
        }
    keys = MetricPoint.objects.filter(run=found).values_list("key", flat=True)
    return {
        "project": project,
        "run": found.name,
        "run_id": found.external_id or None,
        "num_logs": found.last_step,
        "metrics": sorted(set(keys)),
        "config": found.config,
        "last_step": found.last_step,
    }


def projects_of(user: Any) -> list[str]:
    """``get_all_projects``: the caller's run groups."""
    groups = (
        Run.objects.filter(owner=user).exclude(group="").values_list("group", flat=True)
    )
    return sorted(set(groups))
