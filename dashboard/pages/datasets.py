"""``/datasets/``: upload a dataset, list and preview yours, delete one, and start a
new run on it. Adapters over :mod:`dashboard.library.datasets`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from dashboard.library import datasets as ds
from dashboard.library import previews
from dashboard.pages.csp import csp
from dashboard.runs.services import ServiceError

# The upload form's fields whose label is not their parameter's name: an error
# names the field as the form labels it ("Prompt field: line 2 has no 'q' field"),
# not as ``prompt_key`` (``file:`` and ``name:`` are their labels already).
LABELS = {"prompt_key": "Prompt field", "answer_key": "Answer field"}
FIELDS = ("file", "name", "prompt_key", "answer_key")


def labelled(errors: list[str]) -> tuple[list[str], set[str]]:
    """(``errors`` with each field named as the form labels it, the fields named:
    their inputs are marked invalid)."""
    out, fields = [], set()
    for error in errors:
        field, sep, message = error.partition(": ")
        if sep and field in FIELDS:
            fields.add(field)
            error = f"{LABELS.get(field, field)}: {message}"
        out.append(error)
    return out, fields


def by_field(errors: list[str]) -> dict[str, list[str]]:
    """``{field: [message]}`` for the errors that name a field of the form (shown
    beside it, its name left out), ``""`` for the others."""
    out: dict[str, list[str]] = {}
    for error in errors:
        field, sep, message = error.partition(": ")
        key = field if sep and field in FIELDS else ""
        out.setdefault(key, []).append(message if key else error)
    return out


def _list(
    request: HttpRequest,
    errors: list[str],
    form: dict[str, str],
    status=200,
    refused: Any = False,
):
    shown, invalid = labelled(errors)
    context: dict[str, Any] = {
        "datasets": ds.datasets_of(request.user),
        "errors": shown,
        "invalid": invalid,
        "field_errors": by_field(errors),
        # a plain form's refusal loses the chosen file: the page says to choose it
        # again (by its name when one came; ``True``: one came, too large to read)
        "refused": refused not in (False, None),
        "refused_file": getattr(refused, "name", "") or "",
        "form": form,
        "accept": ",".join(sorted(ds.formats())),
        "limit": ds.size_text(settings.DATASET_MAX_UPLOAD_BYTES),
        "limit_bytes": settings.DATASET_MAX_UPLOAD_BYTES,
    }
    return render(request, "pages/datasets.html", context, status=status)


def _wants_json(request: HttpRequest) -> bool:
    """Sent by the page's script (static/js/dataset_upload.js): answered as JSON so
    the page, and the file chosen in it, stays."""
    return request.headers.get("Accept", "").startswith("application/json")


@csp
def dataset_list(request: HttpRequest) -> HttpResponse:
    form = {"name": "", "prompt_key": "prompt", "answer_key": "answer"}
    if request.method != "POST":
        return _list(request, [], form)
    form.update({k: request.POST.get(k, v) for k, v in form.items()})
    chosen: Any = True  # a body refused for its size held a file
    try:
        # Refuse an oversized body before Django spools the file to disk.
        ds.check_upload_size(int(request.META.get("CONTENT_LENGTH") or 0) - 65536)
        chosen = request.FILES.get("file")  # None: no file was chosen
        row = ds.do_upload_dataset(
            request.user,
            chosen,
            name=form["name"],
            prompt_key=form["prompt_key"],
            answer_key=form["answer_key"],
        )
    except ServiceError as exc:
        if _wants_json(request):
            shown, _ = labelled(exc.errors)
            body = {"errors": shown, "fields": by_field(exc.errors)}
            return JsonResponse(body, status=exc.status)
        return _list(request, exc.errors, form, exc.status, refused=chosen)
    messages.info(request, f"Uploaded {row.name}: {row.rows} rows.")
    if _wants_json(request):
        return JsonResponse({"url": reverse("pages:dataset_detail", args=[row.pk])})
    return redirect("pages:dataset_detail", row.pk)


@csp
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    row = ds.get_dataset_for_user(request.user, dataset_id)
    preview = previews.preview_of(row)
    use = (
        reverse("pages:run_new")
        + "?"
        + urlencode({"env": "dataset", "dataset": row.pk})
    )
    return render(
        request,
        "pages/dataset.html",
        {"dataset": row, "preview": preview, "use_url": use},
    )


@require_POST
def dataset_delete(request: HttpRequest, dataset_id: int) -> HttpResponse:
    row = ds.get_dataset_for_user(request.user, dataset_id)
    ds.do_delete_dataset(row)
    messages.info(request, f"Deleted {row.name}.")
    return redirect("pages:datasets")
