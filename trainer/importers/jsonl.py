"""Saved events, as they are: an ``events.jsonl`` or an ``HttpSink`` spool directory.

Both hold the lines ``python -m trainer run`` writes (NaN/inf as strings), so replaying
them is reading and re-sending; the dashboard dedupes what it already has.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def read_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Every event, in order; a line that is not a JSON object names its line."""
    for file in event_files(path):
        with file.open(encoding="utf-8") as fh:
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


def first_config(path: str | Path) -> dict[str, Any]:
    """The config of the first ``run_started`` event ({} without one)."""
    for event in read_events(path):
        if event["type"] == "run_started":
            config = event.get("config")
            return config if isinstance(config, dict) else {}
    return {}
