"""What a run produced: metrics, frames, trajectories, judgements, critical paths,
alerts, what-if reweighting, checkpoints, the export."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Path, Query, Router
from ninja.errors import HttpError

from dashboard.api.schemas import (
    MAX_INT,
    ErrorOut,
    MetricsQuery,
    StepRange,
    TrajectoryPage,
    WhatIfIn,
)
from dashboard.models import Alert, Checkpoint, CriticalPath, Judgement, Run, Trajectory
from dashboard.reads import metrics as metric_reads
from dashboard.reads import stream
from dashboard.reads import trajectories as trajs
from dashboard.reads.runs import alert_dicts, checkpoint_dict
from dashboard.runs import services
from dashboard.runs.execution import checkpoint_kept

router = Router()


def _in_range(model: type, run: Run, q: StepRange):
    qs = model.objects.filter(run=run, step__gt=q.since_step)
    return qs.filter(step=q.step) if q.step is not None else qs


@router.get("/runs/{run_id}/metrics", tags=["data"])
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


@router.get("/runs/{run_id}/backfill", tags=["data"])
def backfill(
    request: HttpRequest,
    run_id: str,
    since_step: int = Query(-1, ge=-1, le=MAX_INT),
    max_steps: int = Query(500, ge=1, le=5000),
):
    """What frames reported after ``since_step`` (for a client that missed frames)."""
    return stream.backfill(
        services.get_run_for_user(request.user, run_id), since_step, max_steps
    )


@router.get("/runs/{run_id}/trajectories", tags=["data"])
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


@router.get(
    "/runs/{run_id}/trajectories/{step}/{group}/{index}",
    response={200: Any, 400: ErrorOut},
    tags=["data"],
)
def trajectory(
    request: HttpRequest,
    run_id: str,
    q: Query[TrajectoryPage],
    step: int = Path(..., ge=0, le=MAX_INT),
    group: int = Path(..., ge=0, le=MAX_INT),
    index: int = Path(..., ge=0, le=MAX_INT),
):
    """One trajectory with its segments' per-token arrays decoded, a page at a time
    (segments from ``offset`` while they fit ``max_tokens`` and ``max_chars``; one
    larger than the page is cut, marked ``cut``; ``page.next`` reads on), its
    judgements and critical path."""
    run = services.get_run_for_user(request.user, run_id)
    key = {"run": run, "step": step, "group": group, "index": index}
    t = Trajectory.objects.filter(**key).first()
    if t is None:
        raise HttpError(404, "Not Found")
    out, page = trajs.trajectory_page(t, q.offset, q.max_tokens, q.max_chars)
    nxt = page.next_offset
    out["page"]["next"] = None if nxt is None else _page_url(request, out["page"], nxt)
    where = (run, step, group, index)
    out["judgements"] = [trajs.judgement_dict(j) for j in trajs.judgements_for(*where)]
    cp = trajs.critical_path_for(*where)
    out["critical_path"] = trajs.critical_path_dict(cp) if cp else None
    return out


def _page_url(request: HttpRequest, page: dict[str, Any], offset: int) -> str:
    from urllib.parse import urlencode

    query = {"offset": offset, "max_tokens": page["max_tokens"]}
    query["max_chars"] = page["max_chars"]
    return f"{request.path}?{urlencode(query)}"


@router.get("/runs/{run_id}/judgements", tags=["data"])
def judgements(request: HttpRequest, run_id: str, q: Query[StepRange]):
    run = services.get_run_for_user(request.user, run_id)
    qs = _in_range(Judgement, run, q).order_by("step", "group", "index", "judge")
    return {
        "judgements": [
            trajs.judgement_dict(j) for j in qs[q.offset : q.offset + q.limit]
        ]
    }


@router.get("/runs/{run_id}/critical-paths", tags=["data"])
def critical_paths(request: HttpRequest, run_id: str, q: Query[StepRange]):
    run = services.get_run_for_user(request.user, run_id)
    qs = _in_range(CriticalPath, run, q).order_by("step", "group", "index")
    return {
        "critical_paths": [
            trajs.critical_path_dict(c) for c in qs[q.offset : q.offset + q.limit]
        ]
    }


@router.get("/runs/{run_id}/alerts", tags=["data"])
def alerts(request: HttpRequest, run_id: str, q: Query[StepRange]):
    """The run's alerts with their evidence, and per detector that fired the reward
    weight that removes its incentive (``suggestions``: the repair loop)."""
    from dashboard.reads.repair import suggestions

    run = services.get_run_for_user(request.user, run_id)
    qs = _in_range(Alert, run, q).order_by("step", "detector")
    found = alert_dicts(run, list(qs[q.offset : q.offset + q.limit]))
    return {
        "alerts": found,
        "suggestions": suggestions(run, [a["detector"] for a in found]),
    }


@router.post("/runs/{run_id}/whatif", response={200: Any, 400: ErrorOut}, tags=["data"])
def whatif(request: HttpRequest, run_id: str, payload: WhatIfIn):
    """The stored rollouts' advantages and ranks recomputed under other reward
    weights: per step and in total, with examples (see ``trainer.whatif``)."""
    from dashboard.reads import whatif as wi

    run = services.get_run_for_user(request.user, run_id)
    return wi.whatif(run, payload.weights, payload.steps, examples=payload.examples)


@router.get("/runs/{run_id}/checkpoints", tags=["data"])
def checkpoints(request: HttpRequest, run_id: str):
    """Every checkpoint the run recorded, oldest first; ``kept``: still on disk (the
    trainer keeps the newest ``checkpoint.keep``; the model download is the newest
    kept one)."""
    run = services.get_run_for_user(request.user, run_id)
    return {
        "checkpoints": [
            checkpoint_dict(c, checkpoint_kept(run.pk, c.step))
            for c in Checkpoint.objects.filter(run=run).order_by("step")
        ]
    }


@router.get("/runs/{run_id}/model", tags=["data"])
def model(
    request: HttpRequest,
    run_id: str,
    kind: str = Query(
        "model",
        description="model: a save_pretrained directory (a LoRA run's adapter merged "
        "into its base); adapter: a LoRA run's adapter alone (peft)",
        max_length=20,
    ),
):
    """The model of the run's newest checkpoint as an uncompressed tar of one
    directory, streamed (``curl -fOJ -H 'Authorization: Bearer T' URL``)."""
    from dashboard.runs import kept_model
    from dashboard.runs.tarstream import TarStream

    run = services.get_run_for_user(request.user, run_id)
    root, kept = kept_model.model_directory(run, kind)
    name = kept_model.archive_name(run, kept, kind)
    tar = TarStream(root, name)
    response = StreamingHttpResponse(tar.achunks(), content_type="application/x-tar")
    response["Content-Length"] = str(tar.length)
    response["Content-Disposition"] = f'attachment; filename="{name}.tar"'
    response["X-Checkpoint-Step"] = str(kept.step)
    return response


_EXPORT_INCLUDE = Query(
    None,
    description="Parts to include, repeated or comma-separated (default: all): "
    + ", ".join(stream.EXPORT_PARTS),
)


@router.get("/runs/{run_id}/export", tags=["data"])
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
