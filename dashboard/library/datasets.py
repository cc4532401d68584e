"""Uploaded datasets (the ``/datasets/`` page): check, store, list, preview, delete.

An upload is written under a temporary name in the owner's folder
(``<first data root>/uploads/<user id>/``, :func:`dashboard.library.roots.uploads_dir`),
validated one row at a time with the trainer's own reader
(:func:`trainer.envs.dataset_files.iter_records`, so the first bad line is reported with
its number exactly as a run would), each row held to the upload limits before it is
parsed (:mod:`dashboard.library.dataset_limits`), and only then renamed into place and
recorded with its preview (:mod:`dashboard.library.previews`): a refused upload leaves
nothing behind, and the file a run reads is the one that was checked. Every dataset is
its owner's alone; anyone else gets a 404.
"""

from __future__ import annotations

import os
import re
import unicodedata
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404

from dashboard.errors import Conflict, ServiceError
from dashboard.library import roots
from dashboard.library.dataset_limits import refusal, size_text, upload_limits
from dashboard.library.filenames import ascii_name, meaningful
from dashboard.library.previews import PREVIEW_ROWS, build_preview
from dashboard.models import Dataset

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


def dataset_of_run(run: Any) -> Dataset | None:
    """The uploaded dataset a run of the ``dataset`` environment reads (its owner's
    upload whose file its config names), so pages can say its name (``数学.jsonl``)
    rather than only the stored file's (``uploads/1/dataset-2c04af4c.jsonl``)."""
    cfg = run.config if isinstance(run.config, dict) else {}
    env = cfg.get("env") if isinstance(cfg.get("env"), dict) else {}
    params = env.get("params") if isinstance(env.get("params"), dict) else {}
    path = params.get("path")
    if run.external or env.get("name") != "dataset" or not isinstance(path, str):
        return None
    # The run's config holds the resolved path (roots.check_paths), the upload the
    # one under its data root as configured, which may go through a symlink; an
    # upload made after the run (its file name reused) is not the one it read.
    real = os.path.realpath(path)
    candidates = Dataset.objects.filter(
        owner_id=run.owner_id,
        path__endswith=os.sep + os.path.basename(path),
        created_at__lte=run.created_at,
    ).order_by("-created_at")
    return next((d for d in candidates if os.path.realpath(d.path) == real), None)


def choices_of(user: Any, value: Any) -> list[dict[str, Any]]:
    """The user's datasets as the run form offers them, newest first: each one's
    name, the path the form writes for it (relative to its data root,
    :func:`roots.shown`), rows, keys, and whether ``value`` (the form's path, as
    typed or as a config holds it) names its file."""
    rows = list(datasets_of(user).order_by("-created_at")[:200])
    value = value.strip() if isinstance(value, str) else ""
    real = None
    if value and rows:
        real = roots.resolve(
            value, roots.data_roots(), want_dir=False, owner_id=user.pk
        )
    out = []
    for d in rows:
        shown = roots.shown(d.path, model=False)
        named = bool(value) and (
            value == shown or (real is not None and real == os.path.realpath(d.path))
        )
        out.append(
            {
                "pk": d.pk,
                "name": d.name,
                "path": shown,
                "rows": d.rows,
                "prompt_key": d.prompt_key,
                "answer_key": d.answer_key,
                "chosen": named,
            }
        )
    return out


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


def check_name(filename: str, name: str | None = None) -> tuple[str, str, str]:
    """(the dataset's name, the stored file's name, its format) from the upload's
    name or the one given. The name is the user's, any letters and digits
    (``problèmes_数学 été.jsonl``; pages escape it); the file's is an ASCII version
    of it (:func:`ascii_name`: ``problemes-ete.jsonl``), ``dataset-<id>`` when
    nothing of it is ASCII (``数学.jsonl``)."""
    raw = unicodedata.normalize(
        "NFC", (name or "").strip() or Path(filename or "").name
    )
    stem, ext = os.path.splitext(raw)
    fmts = formats()
    if ext.lower() not in fmts and (name or "").strip() and filename:
        # a name typed without a format's extension ("v1.2") takes the file's
        stem, ext = raw, os.path.splitext(filename)[1]
    ext = ext.lower()
    if ext not in fmts:
        raise ServiceError(
            f"file: must be one of {', '.join(sorted(fmts))} (this one is {ext or 'none'})"
        )
    if any(c in "/\\" or _control(c) for c in stem):
        raise ServiceError(
            "name: no path separators (/ or \\) or control characters in a name"
        )
    stem = " ".join(stem.split())[:120].strip()
    if not any(c.isalnum() for c in stem):
        raise ServiceError("name: give the dataset a name with letters or digits")
    plain = ascii_name(stem, 120)
    if not meaningful(plain):
        plain = f"dataset-{uuid.uuid4().hex[:8]}"
    return stem + ext, plain + ext, fmts[ext]


# Format characters that reorder or hide text (a name that reads as another's);
# joiners (U+200C, U+200D) are letters' business in Persian, Indic scripts, emoji.
_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e")
_BIDI |= set("\u2066\u2067\u2068\u2069\ufeff")


def _control(c: str) -> bool:
    kind = unicodedata.category(c)
    return kind in ("Cc", "Cs", "Co", "Cn") or (kind == "Cf" and c in _BIDI)


def do_upload_dataset(
    user: Any,
    upload: Any,
    *,
    name: str | None = None,
    prompt_key: str = "prompt",
    answer_key: str = "answer",
) -> Dataset:
    """Validate and store ``upload`` (a Django ``UploadedFile``) for ``user``."""
    if upload is None:
        raise ServiceError("file: choose a file to upload")
    check_upload_size(upload.size)
    for field, key in (("prompt_key", prompt_key), ("answer_key", answer_key)):
        if not _KEY.match(key or ""):
            raise ServiceError(f"{field}: letters, digits, '_', '.' or '-' (1 to 64)")
    shown, filename, fmt = check_name(upload.name, name)
    if datasets_of(user).filter(name=shown).exists():
        raise Conflict(f"name: you already have a dataset named {shown}")
    folder = roots.uploads_dir(user.pk)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".upload-{uuid.uuid4().hex}{Path(filename).suffix}"
    final = None
    try:
        size = _write(upload, tmp)
        rows, first = check_rows(tmp, shown, fmt, prompt_key, answer_key)
        final = _place(tmp, filename)
        with transaction.atomic():
            ds = Dataset.objects.create(
                owner=user,
                name=shown,
                path=str(final),
                rows=rows,
                fields=[str(k) for k in first[0]][:64] if first else [],
                prompt_key=prompt_key,
                answer_key=answer_key,
                size=size,
                preview=build_preview(first),
            )
    except BaseException as exc:
        if final is not None:  # placed, but not recorded: no file without its row
            final.unlink(missing_ok=True)
        if isinstance(exc, IntegrityError):
            raise Conflict(f"name: you already have a dataset named {shown}") from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return ds


def _place(tmp: Path, filename: str) -> Path:
    """``tmp`` linked into place as ``filename`` in its folder, or as
    ``<stem>-<id><ext>`` when that is taken (two names with one ASCII version:
    "café" and "cafe"): never over another dataset's file."""
    stem, ext = os.path.splitext(filename)
    for attempt in range(8):
        final = tmp.parent / (
            filename if attempt == 0 else f"{stem}-{uuid.uuid4().hex[:6]}{ext}"
        )
        try:  # the name reserved (a rename alone would replace a taken one)
            os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        os.replace(tmp, final)
        return final
    raise Conflict(f"name: no free file name for {filename}; choose another name")


def check_rows(
    path: Path, filename: str, fmt: str, prompt_key: str, answer_key: str
) -> tuple[int, list[dict[str, Any]]]:
    """(rows, the first ones as parsed) of the file at ``path``, read one row at a
    time by the trainer's own reader under the upload limits; the first bad row, or
    one over a limit, is a :class:`ServiceError` naming its line."""
    from trainer.envs.dataset_files import DatasetError, iter_records, row_of

    rows, first = 0, []
    try:
        for line, raw in iter_records(str(path), fmt=fmt, limits=upload_limits()):
            row_of(line, raw, prompt_key, answer_key, None, fmt)
            rows += 1
            if len(first) < PREVIEW_ROWS:
                first.append(raw)
    except DatasetError as exc:
        raise ServiceError(refusal(exc, str(path), filename)) from None
    if not rows:
        raise ServiceError(f"file: {filename!r} holds no rows")
    return rows, first


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
