"""``/datasets/``: upload a dataset, list and preview yours, delete one, and start a
new run on it. Adapters over :mod:`dashboard.library.datasets`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
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


def _list(request: HttpRequest, errors: list[str], form: dict[str, str], status=200):
    shown, invalid = labelled(errors)
    context: dict[str, Any] = {
        "datasets": ds.datasets_of(request.user),
        "errors": shown,
        "invalid": invalid,
        "form": form,
        "accept": ",".join(sorted(ds.formats())),
        "limit": ds.size_text(settings.DATASET_MAX_UPLOAD_BYTES),
    }
    return render(request, "pages/datasets.html", context, status=status)


@csp
def dataset_list(request: HttpRequest) -> HttpResponse:
    form = {"name": "", "prompt_key": "prompt", "answer_key": "answer"}
    if request.method != "POST":
        return _list(request, [], form)
    form.update({k: request.POST.get(k, v) for k, v in form.items()})
    try:
        # Refuse an oversized body before Django spools the file to disk.
        ds.check_upload_size(int(request.META.get("CONTENT_LENGTH") or 0) - 65536)
        row = ds.do_upload_dataset(
            request.user,
            request.FILES.get("file"),
            name=form["name"],
            prompt_key=form["prompt_key"],
            answer_key=form["answer_key"],
        )
    except ServiceError as exc:
        return _list(request, exc.errors, form, status=exc.status)
    messages.info(request, f"Uploaded {row.name}: {row.rows} rows.")
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
