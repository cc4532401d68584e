"""A directory as an uncompressed tar, streamed: headers built by ``tarfile``, file
contents read a chunk at a time, never the whole archive in memory.

Every file is opened before the first byte is sent, so a directory pruned while a
slow client downloads (a newer export replacing it) still streams whole: an unlinked
file stays readable through its open descriptor. The length is known up front, so
the response carries ``Content-Length`` and browsers show progress.
"""

from __future__ import annotations

import tarfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

CHUNK = 1 << 20
_BLOCK = tarfile.BLOCKSIZE  # 512


@dataclass
class _Member:
    header: bytes
    fh: IO[bytes]
    size: int


class TarStream:
    """``root``'s regular files (recursively, sorted) under ``prefix/`` in a tar."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.members: list[_Member] = []
        try:
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                fh = path.open("rb")
                size = fh.seek(0, 2)
                fh.seek(0)
                info = tarfile.TarInfo(f"{prefix}/{path.relative_to(root).as_posix()}")
                info.size, info.mode, info.mtime = (
                    size,
                    0o644,
                    int(path.stat().st_mtime),
                )
                header = info.tobuf(format=tarfile.PAX_FORMAT)
                self.members.append(_Member(header, fh, size))
        except BaseException:
            self.close()
            raise

    @property
    def length(self) -> int:
        body = sum(len(m.header) + m.size + _pad(m.size) for m in self.members)
        return body + 2 * _BLOCK  # two zero blocks end the archive

    def chunks(self) -> Iterator[bytes]:
        try:
            for m in self.members:
                yield m.header
                left = m.size
                while left > 0:
                    data = m.fh.read(min(CHUNK, left))
                    if not data:  # the file shrank: the archive would lie
                        raise OSError("a file changed size while it was streamed")
                    left -= len(data)
                    yield data
                if _pad(m.size):
                    yield b"\0" * _pad(m.size)
            yield b"\0" * (2 * _BLOCK)
        finally:
            self.close()

    async def achunks(self) -> AsyncIterator[bytes]:
        """:meth:`chunks` for ASGI: each read in a worker thread (Django would read
        a synchronous iterator to its end before sending the first byte)."""
        from asgiref.sync import sync_to_async

        it = self.chunks()
        step = sync_to_async(lambda: next(it, None), thread_sensitive=False)
        try:
            while (chunk := await step()) is not None:
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        for m in self.members:
            m.fh.close()


def _pad(size: int) -> int:
    return -size % _BLOCK
