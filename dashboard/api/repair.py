"""The repair loop: launch a clone with the weights that remove a hack's incentive,
and read a repair clone's comparison with its parent."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from dashboard.api.schemas import ErrorOut, RepairIn, RunDetailOut
from dashboard.errors import NotFound
from dashboard.reads import repair as repair_reads
from dashboard.reads.runs import run_dict
from dashboard.runs import repair, services

router = Router()


@router.post(
    "/runs/{run_id}/repairs",
    response={201: RunDetailOut, 400: ErrorOut, 403: ErrorOut, 409: ErrorOut},
    tags=["runs"],
)
def launch_repair(request: HttpRequest, run_id: str, payload: RepairIn):
    """A new run with this run's config and these reward weights (``{component:
    weight}``; a component the run lacks is added), linked to it as its parent and
    recording the alert it repairs. Only the run's owner may launch one."""
    source = services.get_run_for_user(request.user, run_id)
    run = repair.do_launch_repair(
        request.user,
        source,
        payload.weights,
        detector=payload.detector,
        alert_step=payload.alert_step,
        name=payload.name,
    )
    return Status(201, run_dict(run, detail=True))


@router.get("/runs/{run_id}/repair", response={200: Any, 404: ErrorOut}, tags=["runs"])
def repair_comparison(request: HttpRequest, run_id: str):
    """For a repair clone: the statistics its parent's alert watches, step by step
    in both runs, against the thresholds, and each run's alerts of that kind."""
    run = services.get_run_for_user(request.user, run_id)
    data = repair_reads.comparison(run)
    if data is None:
        raise NotFound("run: not a repair clone (launched from an alert's what-if)")
    return data
