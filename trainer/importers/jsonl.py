"""Saved events, as they are: an ``events.jsonl``, an ``HttpSink`` spool directory, or
a dashboard export.

All hold the lines ``python -m trainer run`` writes (NaN/inf as strings), so replaying
them is reading and re-sending; the dashboard dedupes what it already has. An export
(``GET /api/runs/{id}/export``) starts with a ``{"type": "run"}`` header instead of a
``run_started``: :func:`replay` turns it into the ``run_started`` (and, for a run
that had ended, the closing ``run_finished``) the header stands for, and
:func:`header` gives its name and framework to the new run.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from trainer.spool import spool_files


class BadEventsFile(ValueError):
    pass


def event_files(path: str | Path) -> list[Path]:
    """The files to replay, in order: the file itself, or a spool directory's files."""
    path = Path(path)
    if path.is_dir():
        files = spool_files(path)
        if not files:
            raise BadEventsFile(f"{path}: no spool-*.ndjson files in this directory")
        return files
    if not path.exists():
        raise BadEventsFile(f"{path}: no such file")
    return [path]


def _open(file: Path) -> IO[str]:
    """The file as text: gzip-compressed (``events.jsonl.gz``, as the export's
    download and the events API take it) or not, told by its first bytes."""
    with file.open("rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    if gzipped:
        return gzip.open(file, "rt", encoding="utf-8")
    return file.open(encoding="utf-8")


def read_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every event, in order; a line that is not a JSON object names its line, a
    file that is not UTF-8 text (or gzip of it) says so."""
    for file in event_files(path):
        try:
            yield from _events_of(file)
        except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as exc:
            raise BadEventsFile(
                f"{file}: not UTF-8 JSON lines, nor gzip of them ({exc})"
            ) from None


def _events_of(file: Path) -> Iterator[dict[str, Any]]:
    """Its events, in order (see :func:`read_events`)."""
    with _open(file) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as exc:
                if not line.endswith("\n"):
                    break  # a torn last line: the writer was killed mid-line
                raise BadEventsFile(f"{file}: line {number}: {exc}") from None
            if not isinstance(event, dict) or "type" not in event:
                raise BadEventsFile(f"{file}: line {number}: not an event object")
            yield event


FINISHED = ("succeeded", "failed", "cancelled")


def header(path: str | Path) -> dict[str, Any] | None:
    """An export's ``run`` header (its first line), or None for events files."""
    for event in read_events(path):
        return event if event["type"] == "run" else None
    return None


def replay(path: str | Path) -> Iterator[dict[str, Any]]:
    """The events to send: :func:`read_events`, an export's header replaced by the
    ``run_started`` it stands for, and its final status sent last."""
    status = None
    for event in read_events(path):
        if event["type"] != "run":
            yield event
            continue
        config = event.get("config")
        yield {
            "type": "run_started",
            "config": config if isinstance(config, dict) else {},
            "start_step": 0,
        }
        status = event.get("status")
    if status in FINISHED:
        yield {"type": "run_finished", "status": status}


def first_config(path: str | Path) -> dict[str, Any]:
    """The config of the first ``run_started`` event or export header ({} without)."""
    for event in read_events(path):
        if event["type"] in ("run_started", "run"):
            config = event.get("config")
            return config if isinstance(config, dict) else {}
    return {}
