"""The framing of W&B's transaction log (``run-<id>.wandb``), read without W&B.

The file is a LevelDB log (``leveldb/doc/log_format.md``) behind a 7-byte header
(``:W&B``, magic ``0xBEE1`` little-endian, version 0), as wandb's own store writes it
(``core``'s ``Store``, ``leveldb.NewWriterExt(f, leveldb.CRCAlgoIEEE)``; the header
counts as the first 7 bytes of block 0). The rest is 32 KiB blocks of chunks::

    checksum: uint32   CRC-32 (IEEE, zlib's; not leveldb's masked CRC-32C) of the
                       type byte and the data; little-endian
    length:   uint16   little-endian
    type:     uint8    FULL=1, or FIRST=2, MIDDLE=3, LAST=4 for a record split
                       across blocks
    data:     length bytes

A chunk never starts in the last 6 bytes of a block (they are zero padding). A record
is the data of one FULL chunk, or of a FIRST, MIDDLES and a LAST joined; each record
is one serialized ``wandb_internal_pb2.Record`` (decoded by the caller).

wandb writes the log a whole block at a time while the run is live, so the end of the
file may hold half a record: :meth:`RecordLog.read` returns the complete records and
leaves the offset at the start of the first incomplete one, to be read again on the
next call. Pure: the standard library only.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

IDENT = b":W&B"
MAGIC = 0xBEE1
VERSION = 0
FILE_HEADER = struct.Struct("<4sHB")
CHUNK_HEADER = struct.Struct("<IHB")
HEADER_LEN = 7
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# The CRC of each type byte, which a chunk's CRC extends over its data.
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}


class BadWandbFile(ValueError):
    """The file is not a W&B transaction log, or a complete chunk in it is corrupt."""


class RecordLog:
    """Reads the records of one transaction log, from where the last call stopped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0  # the first byte not consumed: a record boundary

    def read(self) -> list[bytes]:
        """The records completed since the last call (none while the file holds only
        its header, or a record still being written)."""
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        base = self.offset
        if base == 0:
            if len(data) < HEADER_LEN:
                return []
            self._check_header(data[:HEADER_LEN])
            base, data = HEADER_LEN, data[HEADER_LEN:]
        records, used = _records(data, base, self.path)
        self.offset = base + used
        return records

    def _check_header(self, head: bytes) -> None:
        ident, magic, version = FILE_HEADER.unpack(head)
        if (ident, magic, version) != (IDENT, MAGIC, VERSION):
            raise BadWandbFile(
                f"{self.path}: not a W&B transaction log (header {head!r}; expected "
                f":W&B, magic 0xBEE1, version 0)"
            )


def _records(data: bytes, base: int, path: Path) -> tuple[list[bytes], int]:
    """Complete records of ``data`` (which starts at file offset ``base``, a record
    boundary) and how many bytes they used."""
    records: list[bytes] = []
    parts: list[bytes] = []
    pos = used = 0
    while True:
        left = BLOCK - (base + pos) % BLOCK
        if left < HEADER_LEN:  # the block's zero trailer
            if pos + left > len(data):
                break
            pos += left
            continue
        if pos + HEADER_LEN > len(data):
            break
        crc, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        if crc == length == kind == 0:
            break  # zeros past the last chunk: nothing more is written yet
        end = pos + HEADER_LEN + length
        if end > len(data):
            break  # the chunk is still being written
        chunk = data[pos + HEADER_LEN : end]
        where = f"{path}: offset {base + pos}"
        if kind not in _TYPE_CRC:
            raise BadWandbFile(f"{where}: unknown chunk type {kind}")
        if zlib.crc32(chunk, _TYPE_CRC[kind]) != crc:
            raise BadWandbFile(f"{where}: checksum mismatch")
        pos = end
        if kind in (FULL, FIRST) and parts:
            raise BadWandbFile(f"{where}: a new record inside an unfinished one")
        if kind in (MIDDLE, LAST) and not parts:
            raise BadWandbFile(f"{where}: a record continued without its start")
        parts.append(chunk)
        if kind in (FULL, LAST):
            records.append(b"".join(parts))
            parts = []
            used = pos
    return records, used
