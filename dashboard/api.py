"""The JSON API (django-ninja) at ``/api/``; OpenAPI at ``/api/openapi.json``, docs at
``/api/docs`` (both login-only, assets served locally).

Authentication: a personal API token (``Authorization: Bearer <token>``, no CSRF; see
``/settings/tokens/`` or ``manage.py create_token``), or the browser session with CSRF
on unsafe methods (``X-CSRFToken`` header). Anonymous callers and revoked or unknown
tokens get 401, other users' runs 404, staff see every run. Every error is JSON. Bad input is a 400 whose
``errors`` are ``field: message`` lines; nothing is enqueued then. Numbers that are
not finite are written as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
Views are adapters: parse, call ``services``/``dashboard.reads``, return.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.request import RawPostDataException
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import ValidationError as NinjaValidationError
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder
from ninja.security import HttpBearer, django_auth
from pydantic import ConfigDict

from dashboard import external, jsonsafe, services, tokens
from dashboard.models import Alert, Checkpoint, CriticalPath, Judgement, Run, Trajectory
from dashboard.reads import metrics as metric_reads
from dashboard.reads import stream
from dashboard.reads import trajectories as trajs
from dashboard.reads.runs import alert_dicts, checkpoint_dict, run_dict


class SafeJSONRenderer(JSONRenderer):
    """Never emits bare NaN/Infinity (invalid JSON): they become strings."""

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> str:
        safe = jsonsafe.clean(data, keep_objects=True)
        return json.dumps(safe, cls=NinjaJSONEncoder, allow_nan=False)


log = logging.getLogger(__name__)


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>``: the request acts as the token's user."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = tokens.user_for_token(token)
        if user is not None:
            request.user = user
        return user


api = NinjaAPI(
    title="Agentic RL dashboard API",
    version="1",
    description=__doc__ or "",
    auth=[BearerToken(), django_auth],
    urls_namespace="api",
    docs_decorator=login_required,
    renderer=SafeJSONRenderer(),
)


@api.exception_handler(NinjaValidationError)
def _validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    errors = []
    for err in exc.errors:
        loc = [
            str(p)
            for p in err.get("loc", ())
            if p not in ("body", "payload", "query", "path")
        ]
        errors.append(f"{'.'.join(loc) or '(request)'}: {err.get('msg', 'invalid')}")
    return api.create_response(
        request, {"detail": "invalid request", "errors": errors}, status=400
    )


@api.exception_handler(services.ServiceError)
def _service_error(request: HttpRequest, exc: services.ServiceError) -> HttpResponse:
    return api.create_response(
        request, {"detail": str(exc.errors[0]), "errors": exc.errors}, status=exc.status
    )


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return api.create_response(
        request, {"detail": "request body too large", "errors": [str(exc)]}, status=413
    )


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The traceback goes to the log; the caller gets JSON without server paths.
    log.exception("API error on %s %s", request.method, request.path)
    return api.create_response(
        request,
        {"detail": "internal error; the server log has the details"},
        status=500,
    )


# --- schemas ------------------------------------------------------------------------------
class RunOut(Schema):
    id: UUID
    name: str
    owner: str
    status: str
    queue: str
    attempt: int
    last_step: int
    frame_seq: int
    cancel_requested: bool
    error: str
    external: bool
    framework: str
    parent: UUID | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None


class RunDetailOut(RunOut):
    config: dict[str, Any]


class RunList(Schema):
    count: int
    runs: list[RunOut]


class LaunchIn(Schema):
    model_config = ConfigDict(extra="forbid")
    config: dict[str, Any] = Field(
        description="A TrainConfig (see /api/config/schema)."
    )
    name: str | None = Field(None, description="Defaults to config.name.")


class CloneIn(Schema):
    model_config = ConfigDict(extra="forbid")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Deep-merged into the source config."
    )
    name: str | None = None


class ExternalIn(Schema):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The run's name in the dashboard.")
    framework: str | None = Field(
        None, description='What trains it: "agentic-rl", "trl", "verl", "import"...'
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="Any JSON config (shown and diffed)."
    )


class FinishIn(Schema):
    model_config = ConfigDict(extra="forbid")
    status: str = Field(description="succeeded, failed or cancelled.")
    error: str | None = None


class IngestOut(Schema):
    accepted: int
    duplicates: int
    cancel_requested: bool


class ErrorOut(Schema):
    detail: str
    errors: list[str] = []


class MetricsQuery(Schema):
    keys: str = Field("", max_length=4000, description="Comma-separated metric names.")
    since_step: int = Field(-1, ge=-1)
    points: int = Field(
        1000,
        ge=1,
        le=metric_reads.MAX_POINTS,
        description="Buckets at most (chart width).",
    )


class StepRange(Schema):
    step: int | None = Field(None, ge=0)
    since_step: int = Field(-1, ge=-1)
    limit: int = Field(200, ge=1, le=2000)
    offset: int = Field(0, ge=0)


def _in_range(model: type, run: Run, q: StepRange):
    qs = model.objects.filter(run=run, step__gt=q.since_step)
    return qs.filter(step=q.step) if q.step is not None else qs


# --- runs -------------------------------------------------------------------------------
@api.get("/runs", response=RunList, tags=["runs"])
def list_runs(
    request: HttpRequest,
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0),
):
    runs = services.visible_runs(request.user)
    return {
        "count": runs.count(),
        "runs": [run_dict(r) for r in runs[offset : offset + limit]],
    }


@api.post(
    "/runs", response={201: RunDetailOut, 400: ErrorOut, 409: ErrorOut}, tags=["runs"]
)
def launch_run(request: HttpRequest, payload: LaunchIn):
    run = services.launch_run(request.user, payload.config, name=payload.name)
    return Status(201, run_dict(run, detail=True))


@api.post(
    "/runs/external", response={201: RunDetailOut, 400: ErrorOut}, tags=["external"]
)
def create_external_run(request: HttpRequest, payload: ExternalIn):
    """A run trained elsewhere, which then reports its events to ``/events``."""
    run = external.do_create_external_run(
        request.user,
        name=payload.name,
        framework=payload.framework,
        config=payload.config,
    )
    return Status(201, run_dict(run, detail=True))


@api.get("/runs/{run_id}", response=RunDetailOut, tags=["runs"])
def get_run(request: HttpRequest, run_id: str):
    return run_dict(services.get_run_for_user(request.user, run_id), detail=True)


@api.post(
    "/runs/{run_id}/clone",
    response={201: RunDetailOut, 400: ErrorOut, 409: ErrorOut},
    tags=["runs"],
)
def clone_run(request: HttpRequest, run_id: str, payload: CloneIn):
    source = services.get_run_for_user(request.user, run_id)
    run = services.clone_run(request.user, source, payload.overrides, name=payload.name)
    return Status(201, run_dict(run, detail=True))


@api.post("/runs/{run_id}/cancel", response={200: RunOut, 409: ErrorOut}, tags=["runs"])
def cancel_run(request: HttpRequest, run_id: str):
    return run_dict(
        services.cancel_run(services.get_run_for_user(request.user, run_id))
    )


def _read_body(request: HttpRequest, limit: int) -> bytes:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise external.PayloadTooLarge(
            f"body: {declared} bytes, more than {limit}; send smaller batches"
        )
    try:
        return request.read(limit + 1)
    except RawPostDataException:  # something already read it
        return request.body


@api.post(
    "/runs/{run_id}/events",
    response={200: IngestOut, 400: ErrorOut, 409: ErrorOut, 413: ErrorOut},
    tags=["external"],
    openapi_extra={
        "requestBody": {
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            "description": "One event a line (see /api/events/schema.json); "
            "Content-Encoding: gzip allowed.",
        }
    },
)
def post_events(request: HttpRequest, run_id: str):
    """Store a batch of events of an external run, all or nothing.

    A bad line refuses the whole batch: 400 with ``line N: field: reason``. Events
    already stored are counted as ``duplicates`` and change nothing."""
    from django.conf import settings

    run = external.check_external(services.get_run_for_user(request.user, run_id))
    body = _read_body(request, settings.EVENTS_MAX_BODY_BYTES)
    data = external.decode_body(body, request.headers.get("Content-Encoding"))
    return external.do_ingest_events(run, external.parse_events(data))


@api.post(
    "/runs/{run_id}/finish",
    response={200: RunOut, 400: ErrorOut, 409: ErrorOut},
    tags=["external"],
)
def finish_run(request: HttpRequest, run_id: str, payload: FinishIn):
    run = services.get_run_for_user(request.user, run_id)
    return run_dict(external.do_finish_external_run(run, payload.status, payload.error))


@api.get("/events/schema.json", auth=None, tags=["external"])
def events_schema(request: HttpRequest):
    """The JSON Schema of one event line (``events.jsonl`` and ``/events``)."""
    from trainer.event_schema import events_json_schema

    return events_json_schema()


@api.get("/config/schema", tags=["runs"])
def config_schema(request: HttpRequest):
    """The JSON schema of TrainConfig: the one run schema (form, API, CLI)."""
    from trainer.config import TrainConfig

    return TrainConfig.model_json_schema()


# --- what a run produced ------------------------------------------------------------------
@api.get("/runs/{run_id}/metrics", tags=["data"])
def metrics(request: HttpRequest, run_id: str, q: Query[MetricsQuery]):
    """Downsampled series: per bucket of steps, min/max/last with the step of each.
    Without ``keys``: the list of metric names."""
    run = services.get_run_for_user(request.user, run_id)
    keys = [k.strip() for k in q.keys.split(",") if k.strip()]
    if not keys:
        return {"run": str(run.pk), "keys": metric_reads.metric_keys(run)}
    return HttpResponse(
        metric_reads.downsample_metrics_json(
            run, keys, since_step=q.since_step, points=q.points
        ),
        content_type="application/json",
    )


@api.get("/runs/{run_id}/backfill", tags=["data"])
def backfill(
    request: HttpRequest,
    run_id: str,
    since_step: int = Query(-1, ge=-1),
    max_steps: int = Query(500, ge=1, le=5000),
):
    """What frames reported after ``since_step`` (for a client that missed frames)."""
    return stream.backfill(
        services.get_run_for_user(request.user, run_id), since_step, max_steps
    )


@api.get("/runs/{run_id}/trajectories", tags=["data"])
def trajectories(request: HttpRequest, run_id: str, q: Query[StepRange]):
    run = services.get_run_for_user(request.user, run_id)
    qs = (
        _in_range(Trajectory, run, q)
        .defer("arrays", "segments", "facts", "agent_steps")
        .order_by("step", "group", "index")
    )
    return {
        "trajectories": [
            trajs.trajectory_summary(t) for t in qs[q.offset : q.offset + q.limit]
        ]
    }


@api.get("/runs/{run_id}/trajectories/{step}/{group}/{index}", tags=["data"])
def trajectory(request: HttpRequest, run_id: str, step: int, group: int, index: int):
    """One trajectory with its segments' per-token arrays decoded, its judgements and
    critical path."""
    run = services.get_run_for_user(request.user, run_id)
    key = {"run": run, "step": step, "group": group, "index": index}
    t = Trajectory.objects.filter(**key).first()
    if t is None:
        return api.create_response(request, {"detail": "Not Found"}, status=404)
    out = trajs.trajectory_detail(t)
    where = (run, step, group, index)
    out["judgements"] = [trajs.judgement_dict(j) for j in trajs.judgements_for(*where)]
    cp = trajs.critical_path_for(*where)
    out["critical_path"] = trajs.critical_path_dict(cp) if cp else None
    return out


@api.get("/runs/{run_id}/judgements", tags=["data"])
def judgements(request: HttpRequest, run_id: str, q: Query[StepRange]):
    run = services.get_run_for_user(request.user, run_id)
    qs = _in_range(Judgement, run, q).order_by("step", "group", "index", "judge")
    return {
        "judgements": [
            trajs.judgement_dict(j) for j in qs[q.offset : q.offset + q.limit]
        ]
    }


@api.get("/runs/{run_id}/critical-paths", tags=["data"])
def critical_paths(request: HttpRequest, run_id: str, q: Query[StepRange]):
    run = services.get_run_for_user(request.user, run_id)
    qs = _in_range(CriticalPath, run, q).order_by("step", "group", "index")
    return {
        "critical_paths": [
            trajs.critical_path_dict(c) for c in qs[q.offset : q.offset + q.limit]
        ]
    }


@api.get("/runs/{run_id}/alerts", tags=["data"])
def alerts(request: HttpRequest, run_id: str, q: Query[StepRange]):
    run = services.get_run_for_user(request.user, run_id)
    qs = _in_range(Alert, run, q).order_by("step", "detector")
    return {"alerts": alert_dicts(run, list(qs[q.offset : q.offset + q.limit]))}


# --- what-if reweighting (issue 12) ---------------------------------------------------
class WhatIfIn(Schema):
    model_config = ConfigDict(extra="forbid")
    weights: Any = Field(
        None, description="{component: base weight}; unnamed ones keep the run's."
    )
    steps: Any = Field(None, description="Training steps to recompute; null: all.")


@api.post("/runs/{run_id}/whatif", response={200: Any, 400: ErrorOut}, tags=["data"])
def whatif(request: HttpRequest, run_id: str, payload: WhatIfIn):
    """The stored rollouts' advantages and ranks recomputed under other reward
    weights: per step and in total, with examples (see ``trainer.whatif``)."""
    from dashboard import whatif as wi

    run = services.get_run_for_user(request.user, run_id)
    return wi.whatif(run, payload.weights, payload.steps)


@api.get("/runs/{run_id}/checkpoints", tags=["data"])
def checkpoints(request: HttpRequest, run_id: str):
    run = services.get_run_for_user(request.user, run_id)
    return {
        "checkpoints": [
            checkpoint_dict(c)
            for c in Checkpoint.objects.filter(run=run).order_by("step")
        ]
    }


_EXPORT_INCLUDE = Query(
    None,
    description="Parts to include, repeated or comma-separated (default: all): "
    + ", ".join(stream.EXPORT_PARTS),
)


@api.get("/runs/{run_id}/export", tags=["data"])
def export(
    request: HttpRequest,
    run_id: str,
    include: list[str] = _EXPORT_INCLUDE,
):
    """The run as JSON lines (``application/x-ndjson``), trainer event shapes, streamed
    as it is read (gzip-compressed on the wire when the client accepts it)."""
    run = services.get_run_for_user(request.user, run_id)
    parts = [p.strip() for item in include or [] for p in item.split(",")]
    parts = [p for p in parts if p] or list(stream.EXPORT_PARTS)
    unknown = [p for p in parts if p not in stream.EXPORT_PARTS]
    if unknown:
        raise services.InvalidConfig(
            f"include: unknown part {unknown[0]!r} "
            f"(known: {', '.join(stream.EXPORT_PARTS)})"
        )
    chunks: Any = stream.export_lines(run, parts)
    gzip_ok = "gzip" in request.headers.get("Accept-Encoding", "")
    if gzip_ok:
        chunks = stream.gzip_chunks(chunks)
    response = StreamingHttpResponse(
        _async_chunks(chunks), content_type="application/x-ndjson"
    )
    if gzip_ok:
        response["Content-Encoding"] = "gzip"
    response["Vary"] = "Accept-Encoding"
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.jsonl"'
    return response


async def _async_chunks(chunks):
    """An asynchronous iterator over a synchronous one (each ``next`` in the request's
    own thread, where its database cursor lives): under ASGI, Django would read a
    synchronous iterator to its end before sending the first byte."""
    from asgiref.sync import sync_to_async

    it = iter(chunks)
    step = sync_to_async(lambda: next(it, None), thread_sensitive=True)
    while (chunk := await step()) is not None:
        yield chunk
