"""External runs: trained elsewhere (TRL, verl, our CLI), reported over HTTP."""

from __future__ import annotations

from django.http import HttpRequest
from django.http.request import RawPostDataException
from ninja import Router, Status

from dashboard.api.schemas import (
    ErrorOut,
    ExternalIn,
    FinishIn,
    IngestOut,
    RunDetailOut,
    RunOut,
)
from dashboard.ingest import admission
from dashboard.reads.runs import run_dict
from dashboard.runs import external, services

router = Router()


@router.post(
    "/runs/external",
    response={201: RunDetailOut, 400: ErrorOut, 409: ErrorOut},
    tags=["external"],
)
def create_external_run(request: HttpRequest, payload: ExternalIn):
    """A run trained elsewhere, which then reports its events to ``/events``. A
    user with ``EXTERNAL_RUNS_MAX_PER_USER`` external runs already is refused (409)."""
    run = external.do_create_external_run(
        request.user,
        name=payload.name,
        framework=payload.framework,
        config=payload.config,
    )
    return Status(201, run_dict(run, detail=True))


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


@router.post(
    "/runs/{run_id}/events",
    response={
        200: IngestOut,
        400: ErrorOut,
        409: ErrorOut,
        413: ErrorOut,
        503: ErrorOut,
    },
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

    A bad line refuses the whole batch: 400 with ``line N: field: reason``. The first
    write wins: events already stored are counted as ``duplicates`` and change
    nothing; a re-sent event that differs from what is stored is counted in
    ``conflicts`` (described in ``conflicting``) and changes nothing either. While
    ``INGEST_MAX_CONCURRENT`` bodies are in hand already (after a wait of
    ``INGEST_QUEUE_WAIT_S``): 503 with ``Retry-After``, nothing stored; send it
    again (:mod:`dashboard.ingest.admission`)."""
    from django.conf import settings

    run = external.check_external(services.get_run_for_user(request.user, run_id))
    with admission.slot():
        body = _read_body(request, settings.EVENTS_MAX_BODY_BYTES)
        data = external.decode_body(body, request.headers.get("Content-Encoding"))
        return external.do_ingest_events(run, external.parse_events(data))


@router.post(
    "/runs/{run_id}/finish",
    response={200: RunOut, 400: ErrorOut, 409: ErrorOut},
    tags=["external"],
)
def finish_run(request: HttpRequest, run_id: str, payload: FinishIn):
    run = services.get_run_for_user(request.user, run_id)
    return run_dict(external.do_finish_external_run(run, payload.status, payload.error))


@router.post(
    "/runs/{run_id}/reopen",
    response={200: RunOut, 403: ErrorOut, 409: ErrorOut},
    tags=["external"],
)
def reopen_run(request: HttpRequest, run_id: str):
    """A finished external run takes events again (a trainer resuming it; its
    ``HttpSink`` calls this when given the run's id). Owner only; a running run is
    answered unchanged."""
    run = services.get_run_for_user(request.user, run_id)
    return run_dict(external.do_reopen_external_run(run, request.user))


@router.get("/events/schema.json", auth=None, tags=["external"])
def events_schema(request: HttpRequest):
    """The JSON Schema of one event line (``events.jsonl`` and ``/events``)."""
    from trainer.event_schema import events_json_schema

    return events_json_schema()
