"""Reading files another process may still be writing: the one tailing helper every
reader shares.

Two kinds of file appear in the layouts we import. An *appended* file (verl's
file-logger metrics, prime-rl's ``metrics.jsonl``, miles's dashboard streams, Tinker's
``metrics.jsonl``) grows line by line: :class:`JsonlTail` keeps a byte offset and
returns only whole new lines, so a line still being written waits for the next poll.
A *written-once* file (a verl step dump, a TRL completions parquet, a prime-rl step's
``effective/traces.jsonl``, a miles ``.pt``) is taken whole, once, when
:class:`Settled` says it stopped changing.

Pure: no Django, no knowledge of any one trainer's layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class BadImportFile(ValueError):
    """A file of a foreign layout that cannot be read: names the file (and line)."""


def complete_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """Whole, non-blank lines after ``offset`` and the offset after the last of them
    (a line still being written, without its newline, waits)."""
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode("utf-8").splitlines()
    return [x for x in lines if x.strip()], offset + end


def parse_line(path: Path, number: int, line: str) -> dict[str, Any]:
    """One JSON object; anything else is a :class:`BadImportFile` naming the line."""
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise BadImportFile(f"{path}: line {number}: {exc}") from None
    if not isinstance(value, dict):
        raise BadImportFile(f"{path}: line {number}: not a JSON object")
    return value


class JsonlTail:
    """An appended JSONL file read incrementally: :meth:`read` returns the objects of
    the whole lines written since the previous call (none while the file is absent)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.lines_read = 0

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        lines, self.offset = complete_lines(self.path, self.offset)
        out = []
        for line in lines:
            self.lines_read += 1
            out.append(parse_line(self.path, self.lines_read, line))
        return out


class Settled:
    """Which written-once files are ready: a file is taken once, when it is not empty
    and, with ``settle``, its size and mtime did not change since the previous poll
    (the writer may still be mid-way). :meth:`take` marks a file done."""

    def __init__(self) -> None:
        self._seen: dict[Path, tuple[int, int]] = {}
        self._done: set[Path] = set()

    def ready(self, path: Path, *, settle: bool) -> bool:
        if path in self._done or not path.is_file():
            return False
        stat = path.stat()
        now = (stat.st_size, stat.st_mtime_ns)
        before, self._seen[path] = self._seen.get(path), now
        return stat.st_size > 0 and (not settle or before == now)

    def take(self, path: Path) -> None:
        self._done.add(path)

    def done(self, path: Path) -> bool:
        return path in self._done


def read_jsonl_file(path: Path) -> list[dict[str, Any]] | None:
    """A written-once JSONL file's objects, or None while its last line is still
    being written (no final newline yet)."""
    size = path.stat().st_size
    lines, end = complete_lines(path, 0)
    if end != size:
        return None
    return [parse_line(path, n, line) for n, line in enumerate(lines, start=1)]
