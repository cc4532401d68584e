"""The on-disk spool of :class:`trainer.httpsink.HttpSink`: events not yet delivered.

A directory of append-only NDJSON files named ``spool-<seq>.ndjson`` (one event per
line, exactly as ``events.jsonl`` holds them); ``seq`` orders the files, oldest first.
Lines are appended at the tail and read back from the head; a file is deleted once every
line of it was delivered. A batch that must go back in front of everything (it failed
while newer events were being spooled) becomes a new file with a smaller ``seq``.

The files outlive the process: a sink opened on the same directory sends them first,
and ``python -m trainer import DIR`` replays them. Not thread-safe: the sink calls it
under its own lock. Knows nothing about HTTP.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("trainer.httpsink")

PREFIX = "spool-"
SUFFIX = ".ndjson"
FIRST_SEQ = 10**11  # room below for batches put back in front


def spool_files(directory: str | Path) -> list[Path]:
    """The spool files of ``directory``, oldest first."""
    found = []
    for path in Path(directory).glob(f"{PREFIX}*{SUFFIX}"):
        digits = path.name[len(PREFIX) : -len(SUFFIX)]
        if digits.isdigit():
            found.append((int(digits), path))
    return [p for _, p in sorted(found)]


class Spool:
    def __init__(self, directory: str | Path, *, file_bytes: int = 32 << 20) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_bytes = file_bytes
        self._files = spool_files(self.dir)
        self._offset = 0  # bytes of the head file already delivered
        self._tail: BinaryIO | None = None  # append handle of the last file
        self._tail_bytes = 0

    def _seq(self, path: Path) -> int:
        return int(path.name[len(PREFIX) : -len(SUFFIX)])

    def _path(self, seq: int) -> Path:
        return self.dir / f"{PREFIX}{seq:012d}{SUFFIX}"

    def pending(self) -> bool:
        """Whether any line waits to be delivered."""
        if self._tail is not None:
            self._tail.flush()
        for i, path in enumerate(self._files):
            size = path.stat().st_size if path.exists() else 0
            if size > (self._offset if i == 0 else 0):
                return True
        return False

    def append(self, lines: list[str]) -> None:
        """Adds lines at the end (newest)."""
        if not lines:
            return
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if self._tail is None or self._tail_bytes >= self.file_bytes:
            self._close_tail()
            seq = self._seq(self._files[-1]) + 1 if self._files else FIRST_SEQ
            path = self._path(seq)
            self._files.append(path)
            self._tail = path.open("ab")
            self._tail_bytes = 0
        self._tail.write(data)
        self._tail.flush()
        self._tail_bytes += len(data)

    def prepend(self, lines: list[str]) -> None:
        """Puts lines in front of everything spooled (they are older)."""
        if not lines:
            return
        if self._files and self._offset:
            # Keep the head file's delivered prefix out of the way: cut it now.
            self._rewrite_head()
        seq = self._seq(self._files[0]) - 1 if self._files else FIRST_SEQ
        path = self._path(seq)
        path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
        self._files.insert(0, path)

    def read(self, max_lines: int, max_bytes: int) -> tuple[list[str], int]:
        """Up to ``max_lines`` lines (and about ``max_bytes``) from the head file, and
        the offset to :meth:`commit` once they are delivered. Never spans two files."""
        if self._tail is not None:
            self._tail.flush()
        while self._files:
            head = self._files[0]
            lines: list[str] = []
            pos = self._offset
            with head.open("rb") as fh:
                fh.seek(pos)
                for raw in fh:
                    if not raw.endswith(b"\n"):
                        break  # torn by a crash mid-write, or still being written
                    if lines and (
                        len(lines) >= max_lines
                        or pos + len(raw) - self._offset > max_bytes
                    ):
                        break
                    pos += len(raw)
                    text = raw.decode("utf-8").strip()
                    if text:
                        lines.append(text)
                if lines or pos > self._offset:
                    return lines, pos
                rest = fh.seek(0, 2) - pos
            if self._is_tail(head):
                return [], pos
            if rest:
                log.warning("dropping %d torn bytes at the end of %s", rest, head)
            self._drop_head()
        return [], 0

    def commit(self, offset: int) -> None:
        """Marks the head file delivered up to ``offset``; deletes it when done."""
        if not self._files:
            return
        self._offset = offset
        head = self._files[0]
        if self._tail is not None and self._is_tail(head):
            self._tail.flush()
        if offset >= head.stat().st_size:
            self._drop_head()

    def count_lines(self) -> int:
        """Lines still to deliver (for messages; reads the files)."""
        if self._tail is not None:
            self._tail.flush()
        total = 0
        for i, path in enumerate(self._files):
            with path.open("rb") as fh:
                if i == 0:
                    fh.seek(self._offset)
                total += sum(1 for raw in fh if raw.strip())
        return total

    def close(self) -> None:
        self._close_tail()

    # -- internals -------------------------------------------------------------------

    def _is_tail(self, path: Path) -> bool:
        return self._tail is not None and path == self._files[-1]

    def _close_tail(self) -> None:
        if self._tail is not None:
            self._tail.close()
            self._tail = None

    def _drop_head(self) -> None:
        head = self._files.pop(0)
        if self._tail is not None and not self._files:
            self._close_tail()
        head.unlink(missing_ok=True)
        self._offset = 0

    def _rewrite_head(self) -> None:
        head = self._files[0]
        if self._is_tail(head):
            self._close_tail()
        rest = head.read_bytes()[self._offset :]
        head.write_bytes(rest)
        self._offset = 0
