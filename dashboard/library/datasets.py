"""Uploaded datasets (the ``/datasets/`` page): check, store, list, preview, delete.

An upload is written under a temporary name in the owner's folder
(``<first data root>/uploads/<user id>/``, :func:`dashboard.library.roots.uploads_dir`),
validated with the trainer's own reader (:func:`trainer.envs.dataset_files.read_rows`,
so the first bad line is reported with its number exactly as a run would), and only
then renamed into place and recorded: a refused upload leaves nothing behind. Every
dataset is its owner's alone; anyone else gets a 404.
"""

from __future__ import annotations

import csv
import json
import os
import re
import uuid
from itertools import islice
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404

from dashboard.errors import Conflict, ServiceError
from dashboard.library import roots
from dashboard.models import Dataset

PREVIEW_ROWS = 5
PREVIEW_CHARS = 300
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def formats() -> dict[str, str]:
    """Accepted extensions: JSONL and CSV, Parquet when pyarrow is importable."""
    out = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return out
    return {**out, ".parquet": "parquet"}


def datasets_of(user: Any) -> QuerySet[Dataset]:
    return (
        Dataset.objects.filter(owner=user)
        if user.is_authenticated
        else Dataset.objects.none()
    )


def get_dataset_for_user(user: Any, dataset_id: Any) -> Dataset:
    """The user's own dataset, or Http404 (missing and another user's read alike)."""
    try:
        return datasets_of(user).get(pk=int(dataset_id))
    except (Dataset.DoesNotExist, ValueError, TypeError):
        raise Http404("no such dataset") from None


def check_upload_size(size: Any) -> None:
    limit = settings.DATASET_MAX_UPLOAD_BYTES
    try:
        size = int(size or 0)
    except (TypeError, ValueError):
        size = 0
    if size > limit:
        raise ServiceError(
            f"file: the upload is larger than the limit of {size_text(limit)} "
            "(DATASET_MAX_UPLOAD_BYTES)"
        )


def check_name(filename: str, name: str | None = None) -> tuple[str, str]:
    """(the stored file name, its format) from the upload's name or the one given."""
    raw = (name or "").strip() or Path(filename or "").name
    stem, ext = os.path.splitext(raw)
    if not ext and filename:  # a name typed without extension takes the file's
        ext = os.path.splitext(filename)[1]
    ext = ext.lower()
    fmts = formats()
    if ext not in fmts:
        raise ServiceError(
            f"file: must be one of {', '.join(sorted(fmts))} (this one is {ext or 'none'})"
        )
    stem = _UNSAFE.sub("-", stem).strip(".-")[:120]
    if not stem:
        raise ServiceError("name: give the dataset a name of letters and digits")
    return stem + ext, fmts[ext]


def do_upload_dataset(
    user: Any,
    upload: Any,
    *,
    name: str | None = None,
    prompt_key: str = "prompt",
    answer_key: str = "answer",
) -> Dataset:
    """Validate and store ``upload`` (a Django ``UploadedFile``) for ``user``."""
    from trainer.envs.dataset_files import DatasetError, read_rows

    if upload is None:
        raise ServiceError("file: choose a file to upload")
    check_upload_size(upload.size)
    for field, key in (("prompt_key", prompt_key), ("answer_key", answer_key)):
        if not _KEY.match(key or ""):
            raise ServiceError(f"{field}: letters, digits, '_', '.' or '-' (1 to 64)")
    filename, fmt = check_name(upload.name, name)
    if datasets_of(user).filter(name=filename).exists():
        raise Conflict(f"name: you already have a dataset named {filename}")
    folder = roots.uploads_dir(user.pk)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".upload-{uuid.uuid4().hex}{Path(filename).suffix}"
    final = folder / filename
    try:
        size = _write(upload, tmp)
        try:
            rows = read_rows(
                str(tmp), fmt=fmt, prompt_key=prompt_key, answer_key=answer_key
            )
        except DatasetError as exc:
            msg = str(exc).replace(repr(str(tmp)), repr(filename))
            raise ServiceError(re.sub(r"^path: ", "file: ", msg)) from None
        except (UnicodeDecodeError, csv.Error) as exc:
            raise ServiceError(f"file: cannot be read as {fmt} text ({exc})") from None
        fields = first_fields(tmp, fmt)
        with transaction.atomic():
            ds = Dataset.objects.create(
                owner=user,
                name=filename,
                path=str(final),
                rows=len(rows),
                fields=fields,
                prompt_key=prompt_key,
                answer_key=answer_key,
                size=size,
            )
            os.replace(tmp, final)
    except IntegrityError:
        raise Conflict(f"name: you already have a dataset named {filename}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return ds


def _write(upload: Any, dest: Path) -> int:
    """Copy the upload, refusing it as soon as it passes the limit (``size`` is
    what the client claimed)."""
    size = 0
    with dest.open("wb") as fh:
        for chunk in upload.chunks():
            size += len(chunk)
            check_upload_size(size)
            fh.write(chunk)
    return size


def do_delete_dataset(ds: Dataset) -> None:
    path = Path(ds.path)
    if roots.resolve(
        str(path), roots.data_roots(), want_dir=False, owner_id=ds.owner_id
    ):
        path.unlink(missing_ok=True)
    ds.delete()


def _raw_records(path: Path, fmt: str) -> Any:
    if fmt == "jsonl":
        with path.open(encoding="utf-8") as fh:
            for text in fh:
                if text.strip():
                    yield json.loads(text)
    elif fmt == "csv":
        with path.open(encoding="utf-8", newline="") as fh:
            yield from csv.DictReader(fh)
    else:
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=PREVIEW_ROWS):
            yield from batch.to_pylist()


def first_fields(path: Path, fmt: str) -> list[str]:
    for record in _raw_records(path, fmt):
        return [str(k) for k in record][:64] if isinstance(record, dict) else []
    return []


def preview(ds: Dataset) -> tuple[list[str], list[list[str]]]:
    """(columns, the first rows as text): shown escaped by the template."""
    path = Path(ds.path)
    fmt = formats().get(path.suffix.lower(), "jsonl")
    try:
        records = [r for r in islice(_raw_records(path, fmt), PREVIEW_ROWS)]
    except (OSError, ValueError, csv.Error):
        return [], []
    columns = list(dict.fromkeys(str(k) for r in records for k in r))[:16]
    return columns, [[_cell(r.get(c)) for c in columns] for r in records]


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def size_text(n: int) -> str:
    return f"{n / (1 << 20):g} MB" if n >= 1 << 20 else f"{n} bytes"
