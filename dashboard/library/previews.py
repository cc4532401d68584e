"""A dataset's preview: its first rows as text, its columns and their types, kept on
the :class:`~dashboard.models.Dataset` row when the upload is checked, so that showing
it is a database read, never a parse of the file.

A dataset stored before previews were kept has its preview computed once, from its
first rows only, under the upload limits (a file that passes them no more says so in
the preview), and stored. This module knows nothing of requests or templates.
"""

from __future__ import annotations

import json
from contextlib import closing
from itertools import islice
from pathlib import Path
from typing import Any, TypedDict

from dashboard.library.dataset_limits import refusal, upload_limits
from dashboard.models import Dataset

PREVIEW_ROWS = 5
PREVIEW_COLUMNS = 16
PREVIEW_CHARS = 300


class Preview(TypedDict):
    columns: list[str]
    types: list[str]
    rows: list[list[str]]
    error: str


def build_preview(records: list[Any], error: str = "") -> Preview:
    """The preview of the first ``records`` (dicts; anything else shows no
    columns): every column any of them has, in order of appearance."""
    records = [r for r in records[:PREVIEW_ROWS] if isinstance(r, dict)]
    columns = list(dict.fromkeys(str(k) for r in records for k in r))
    columns = columns[:PREVIEW_COLUMNS]
    by_name = [{str(k): v for k, v in r.items()} for r in records]
    types = [_type_of([r.get(c) for r in by_name]) for c in columns]
    rows = [[_cell(r.get(c)) for c in columns] for r in by_name]
    return {"columns": columns, "types": types, "rows": rows, "error": error}


def preview_of(ds: Dataset) -> Preview:
    """The stored preview; for a dataset stored without one, computed (bounded) and
    stored. A file gone missing is said so and nothing is stored."""
    if ds.preview is not None:
        return ds.preview
    from trainer.envs.dataset_files import DatasetError, file_format, iter_records

    gone = build_preview([], "The file cannot be read any more.")
    if not Path(ds.path).is_file():
        return gone
    try:
        records = iter_records(
            ds.path, fmt=file_format(ds.path), limits=upload_limits()
        )
        with closing(records):  # the first rows only: the file is closed after them
            preview = build_preview([raw for _, raw in islice(records, PREVIEW_ROWS)])
    except DatasetError as exc:
        preview = build_preview([], refusal(exc, ds.path, ds.name))
    except OSError:
        return gone
    Dataset.objects.filter(pk=ds.pk).update(preview=preview)
    ds.preview = preview
    return preview


def _type_of(values: list[Any]) -> str:
    """The JSON kind of a column's first value that is not null."""
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int | float):
            return "number"
        if isinstance(v, str):
            return "string"
        return "list" if isinstance(v, list | tuple) else "object"
    return "null"


def _cell(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
