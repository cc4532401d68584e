"""Run services (Zulip-style): ``check_*`` validates and raises, ``do_*`` mutates.

Views, the API, consumers and commands call these and nothing else to change a run.
Work that leaves the process (enqueueing the task, streaming a frame) is registered
with ``transaction.on_commit`` so it never races the commit it depends on.
"""

from __future__ import annotations

import copy
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from dashboard import jsonsafe
from dashboard.errors import Conflict, InvalidConfig, ServiceError  # noqa: F401
from dashboard.live import frames
from dashboard.models import ACTIVE_STATUSES, UNFINISHED_STATUSES, Run, RunStatus
from dashboard.runs import devices, lease

MAX_CONFIG_DEPTH = 24
MAX_CONFIG_NODES = 20_000


# --- reading -------------------------------------------------------------------------
def visible_runs(user: Any) -> QuerySet[Run]:
    """Runs a user may see: their own; staff see all."""
    if not getattr(user, "is_authenticated", False):
        return Run.objects.none()
    runs = Run.objects.select_related("owner")
    return runs if user.is_staff else runs.filter(owner=user)


def get_run_for_user(user: Any, run_id: Any) -> Run:
    """The run, or Http404 when it does not exist *or* is not the user's."""
    try:
        return visible_runs(user).get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError, DjangoValidationError):
        raise Http404("no such run") from None  # a malformed id is just "not found"


async def aget_run_for_user(user: Any, run_id: Any) -> Run | None:
    """Async wrapper for consumers: the run or None."""

    def _get() -> Run | None:
        try:
            return get_run_for_user(user, run_id)
        except Http404:
            return None

    return await database_sync_to_async(_get)()


# --- checks -------------------------------------------------------------------------
def check_shape(
    value: Any, path: str = "config", depth: int = 0, budget: list[int] | None = None
) -> None:
    """Refuse absurd nesting or size before the schema sees it, and text no column
    can store (NUL, lone surrogates: :func:`dashboard.jsonsafe.text_problem`)."""
    budget = budget if budget is not None else [MAX_CONFIG_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        raise InvalidConfig(f"{path}: config is too large")
    if depth > MAX_CONFIG_DEPTH:
        raise InvalidConfig(
            f"{path}: nested too deeply (more than {MAX_CONFIG_DEPTH} levels)"
        )
    if isinstance(value, str):
        check_text(path, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(f"{path}.{key}"[:200], str(key))
            check_shape(item, f"{path}.{key}"[:200], depth + 1, budget)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_shape(item, f"{path}.{i}"[:200], depth + 1, budget)


def check_config(data: Any, user: Any = None) -> Any:
    """A validated ``TrainConfig`` that the platform may run for ``user``, or
    InvalidConfig naming each bad field: the schema, then what only the platform
    knows (paths inside the roots, judge endpoints, ``model.init_from_run``)."""
    from pydantic import ValidationError

    from trainer.config import TrainConfig, format_errors

    if not isinstance(data, dict):
        raise InvalidConfig("config: must be a JSON object")
    check_shape(data)
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidConfig([f"config.{line}" for line in format_errors(exc)]) from None
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise InvalidConfig([f"config.{line}" for line in format_errors(exc)]) from None
    return check_platform(cfg, user)


def check_platform(cfg: Any, user: Any) -> Any:
    """``cfg`` with every path replaced by the real path it was authorised as, or
    InvalidConfig. Rules: :mod:`dashboard.library.roots`; ``init_from_run``: a run ``user``
    may read that has a recorded checkpoint of the same model; an environment that
    reads a file must build from it (:mod:`dashboard.runs.envcheck`)."""
    from dashboard.library import roots
    from dashboard.models import JudgeEndpoint
    from dashboard.runs import envcheck
    from trainer.config import TrainConfig

    endpoints = set(
        JudgeEndpoint.objects.filter(enabled=True).values_list("name", flat=True)
    )
    config, errors = roots.check_paths(
        cfg.model_dump(mode="json"),
        owner_id=getattr(user, "pk", None),
        endpoints=endpoints,
    )
    errors += check_init_from_run(user, config)
    errors += check_processes(cfg)
    if errors:
        raise InvalidConfig(errors)
    checked = TrainConfig.model_validate(config)
    errors = envcheck.check_env(checked)  # a dataset row without the prompt key
    if errors:
        raise InvalidConfig(errors)
    errors = check_takers(checked)
    if errors:
        raise InvalidConfig(errors)
    return checked


def check_takers(cfg: Any) -> list[str]:
    """A run some live worker serves (``devices.check_served``) and whose step fits
    the limits and the workers that would take it (``dashboard.runs.budget``)."""
    from dashboard.runs import budget, workers

    offers = workers.offers()
    errors = devices.check_served(cfg, offers)
    return errors + budget.check_budget(cfg, devices.takers(cfg, offers))


def step_estimate(cfg: Any) -> str | None:
    """The size of one step of a checked config, in a line for the form."""
    from dashboard.runs import budget, workers

    return budget.describe(cfg, devices.takers(cfg, workers.offers()))


def check_processes(cfg: Any) -> list[str]:
    """Nothing queued that no worker can take: ``resources.processes`` at most the
    devices of the largest worker (``dashboard.runs.devices.max_processes``)."""
    wanted = cfg.resources.processes
    kind = devices.kind_of(cfg)
    most = devices.max_processes(kind)
    if wanted <= most:
        return []
    return [
        f"config.resources.processes: {wanted} processes asked, the {kind} workers "
        f"here give a run at most {most} (RUN_MAX_PROCESSES: the devices of the "
        "largest worker); train on more with "
        "`python -m trainer run CONFIG --nproc-per-node N --report-to URL`, which "
        "streams the run here"
    ]


INIT_FIELD = "config.model.init_from_run"


def check_init_from_run(user: Any, config: dict[str, Any]) -> list[str]:
    """Refusals for ``model.init_from_run``: another user's run reads exactly like a
    missing one."""
    from dashboard.runs.execution import newest_checkpoint

    model = config.get("model") or {}
    run_id = model.get("init_from_run")
    if not run_id:
        return []
    try:
        source = get_run_for_user(user, run_id)
    except Http404:
        return [f"{INIT_FIELD}: no such run"]
    if source.external or newest_checkpoint(source.pk) is None:
        return [f"{INIT_FIELD}: that run has no checkpoint on this platform"]
    from trainer.config import TrainConfig

    try:
        theirs = TrainConfig.model_validate(source.config).model_dump(mode="json")
    except ValueError:
        theirs = {"model": {}, "env": {}}
    same = all(theirs["model"].get(k) == model.get(k) for k in ("path", "size", "lora"))
    if same and not model.get("path"):  # a from-scratch model's vocabulary is the env's
        same = theirs["env"].get("name") == config["env"]["name"]
    if not same:
        return [
            f"{INIT_FIELD}: that run trained another model (model.path, model.size "
            "and model.lora must match; for a from-scratch model, env.name too)"
        ]
    return []


def check_run_limit(user: Any) -> None:
    """At most RUN_MAX_ACTIVE_PER_USER queued or running runs per user on this
    platform's workers (external runs train elsewhere and do not count, nor do
    demo runs, which pause for a user's run). Call inside a transaction: the
    user row is locked so launches serialise."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    active = Run.objects.filter(
        owner=user, status__in=ACTIVE_STATUSES, external=False, demo=False
    ).count()
    if active >= settings.RUN_MAX_ACTIVE_PER_USER:
        raise Conflict(
            f"runs: {active} runs are already queued or running "
            f"(limit {settings.RUN_MAX_ACTIVE_PER_USER}); wait or cancel one"
        )


def check_text(field: str, value: str) -> str:
    """``value``, or InvalidConfig naming ``field`` when no column can store it."""
    problem = jsonsafe.text_problem(value)
    if problem:
        raise InvalidConfig(f"{field}: {problem}")
    return value


def check_name(name: Any) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or not 1 <= len(name.strip()) <= 200:
        raise InvalidConfig("name: must be a string of 1 to 200 characters")
    return check_text("name", name.strip())


def _named(config: Any) -> bool:
    """Whether ``config`` (as given) names its run."""
    if not isinstance(config, dict):
        return True  # a TrainConfig: its name is its own
    value = config.get("name")
    return isinstance(value, str) and bool(value.strip())


def auto_name(user: Any, cfg: Any) -> str:
    """``<env>-<preset>-<n>``, n one past the highest of ``user``'s runs so named."""
    prefix = f"{cfg.env.name}-{cfg.algorithm.preset}-"
    taken = Run.objects.filter(owner=user, name__startswith=prefix)
    numbers = [
        int(rest)
        for rest in (n[len(prefix) :] for n in taken.values_list("name", flat=True))
        if rest.isdigit() and len(rest) < 10
    ]
    return f"{prefix}{max(numbers, default=0) + 1}"[:200]


def merge_overrides(
    base: dict[str, Any], overrides: Any, path: str = "overrides"
) -> dict[str, Any]:
    """``base`` with ``overrides`` deep-merged in (dicts merge, anything else replaces)."""
    if not isinstance(overrides, dict):
        raise InvalidConfig(f"{path}: must be a JSON object")
    check_shape(overrides, path)
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overrides(out[key], value, f"{path}.{key}")
        else:
            out[key] = copy.deepcopy(value)
    return out


# --- actions -------------------------------------------------------------------------
def do_launch_run(
    user: Any,
    config: Any,
    *,
    name: str | None = None,
    parent: Run | None = None,
    demo: bool = False,
    repair: dict[str, Any] | None = None,
) -> Run:
    """Validate, create a queued run, enqueue it after the commit. ``demo``: a demo
    run, which yields to users' runs on the embedded executor. ``repair``: what the
    clone repairs in ``parent`` (``dashboard.runs.repair``)."""
    cfg = check_config(config, user)
    name = check_name(name)
    if name is None and not _named(config):
        # No name given: one from what the run is (calc-grpo-3), not a list of "run"s.
        name = auto_name(user, cfg)
        cfg = cfg.model_copy(update={"name": name})
    if name is not None and name != cfg.name:
        # The run's name and its config's agree (a clone named "x (repair: ...)"
        # kept its parent's name in the config it shows and exports).
        cfg = cfg.model_copy(update={"name": name})
    name = name or cfg.name
    with transaction.atomic():
        check_run_limit(user)
        run = Run.objects.create(
            owner=user,
            name=name,
            config=cfg.model_dump(mode="json"),
            parent=parent,
            repair=repair or {},
            queue=devices.queue_for(cfg),
            enqueued_at=timezone.now(),
            demo=demo,
        )
        lease.enqueue_on_commit(run)
    return run


NOT_CLONEABLE = (
    "run: an external run is trained elsewhere; its config (its trainer's own "
    "settings) is not one this trainer runs, so it cannot be cloned here"
)


def do_clone_run(
    user: Any, source: Run, overrides: Any = None, *, name: str | None = None
) -> Run:
    """Launch a copy of ``source``'s config with ``overrides`` merged in; an external
    run's config is its trainer's, never launched here (the API once started a run
    of the default config from one)."""
    if source.external:
        raise InvalidConfig(NOT_CLONEABLE)
    config = merge_overrides(source.config, overrides or {})
    return do_launch_run(
        user, config, name=name or f"{source.name} (clone)"[:200], parent=source
    )


def do_cancel_run(run: Run) -> Run:
    """Cooperative cancel: a queued or paused run is cancelled now, a running one at
    its next step (the trainer polls ``cancel_requested``; a pause asked before is
    overruled). Never revokes or kills a process."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if run.status not in UNFINISHED_STATUSES:
            raise Conflict(f"status: run is already {run.status}")
        run.cancel_requested = True
        fields = ["cancel_requested"]
        if run.status == RunStatus.PAUSED:  # its "Resume queues it again" is over
            run.error = ""
            fields.append("error")
        if run.status in (RunStatus.QUEUED, RunStatus.PAUSED):
            run.status, run.finished_at = RunStatus.CANCELLED, timezone.now()
            fields += ["status", "finished_at"]
        run.save(update_fields=fields)
        frames.send_on_commit(run.id)
    return run


# Plain names for callers that read better without the prefix.
launch_run = do_launch_run
clone_run = do_clone_run
cancel_run = do_cancel_run
