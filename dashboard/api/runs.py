"""Runs: list, launch, read, clone, cancel; the config schema."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status

from dashboard.api.schemas import (
    MAX_INT,
    CloneIn,
    ErrorOut,
    LaunchIn,
    RunDetailOut,
    RunList,
    RunOut,
)
from dashboard.reads.runs import run_dict, with_last_reward
from dashboard.runs import pausing, services
from dashboard.runs.waiting import waiting

router = Router()


@router.get("/runs", response=RunList, tags=["runs"])
def list_runs(
    request: HttpRequest,
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=MAX_INT),
    group: str | None = Query(None, max_length=200, description="A run group."),
):
    runs = services.visible_runs(request.user)
    if group:
        runs = runs.filter(group=services.check_text("group", group))
    return {
        "count": runs.count(),
        "runs": [
            # attempts: each run's wall time (duration_s), in one query for the page
            run_dict(r)
            for r in with_last_reward(runs).prefetch_related("attempts")[
                offset : offset + limit
            ]
        ],
    }


@router.post(
    "/runs", response={201: RunDetailOut, 400: ErrorOut, 409: ErrorOut}, tags=["runs"]
)
def launch_run(request: HttpRequest, payload: LaunchIn):
    run = services.launch_run(request.user, payload.config, name=payload.name)
    return Status(201, run_dict(run, detail=True))


@router.get("/runs/{run_id}", response=RunDetailOut, tags=["runs"])
def get_run(request: HttpRequest, run_id: str):
    run = services.get_run_for_user(request.user, run_id)
    return {**run_dict(run, detail=True), "waiting": waiting(run)}


@router.post(
    "/runs/{run_id}/clone",
    response={201: RunDetailOut, 400: ErrorOut, 409: ErrorOut},
    tags=["runs"],
)
def clone_run(request: HttpRequest, run_id: str, payload: CloneIn):
    source = services.get_run_for_user(request.user, run_id)
    run = services.clone_run(request.user, source, payload.overrides, name=payload.name)
    return Status(201, run_dict(run, detail=True))


@router.post(
    "/runs/{run_id}/cancel", response={200: RunOut, 409: ErrorOut}, tags=["runs"]
)
def cancel_run(request: HttpRequest, run_id: str):
    return run_dict(
        services.cancel_run(services.get_run_for_user(request.user, run_id))
    )


@router.post(
    "/runs/{run_id}/pause", response={200: RunOut, 409: ErrorOut}, tags=["runs"]
)
def pause_run(request: HttpRequest, run_id: str):
    """Pause a run of this platform: a queued one at once (``paused``), a running
    one at its next step, keeping its state (``pause_requested`` until then)."""
    return run_dict(pausing.pause_run(services.get_run_for_user(request.user, run_id)))


@router.post(
    "/runs/{run_id}/resume", response={200: RunOut, 409: ErrorOut}, tags=["runs"]
)
def resume_run(request: HttpRequest, run_id: str):
    """Queue a paused run again: it goes on from the step it paused at."""
    return run_dict(pausing.resume_run(services.get_run_for_user(request.user, run_id)))


@router.get("/config/schema", tags=["runs"])
def config_schema(request: HttpRequest):
    """The JSON schema of TrainConfig: the one run schema (form, API, CLI)."""
    from trainer.config import TrainConfig

    return TrainConfig.model_json_schema()
