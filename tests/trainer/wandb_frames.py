"""Frames records the way W&B's store writes its transaction log (leveldb's log
writer: 32 KiB blocks, FULL/FIRST/MIDDLE/LAST chunks, CRC-32 of type and data), for
tests that build a log byte by byte."""

from __future__ import annotations

import struct
import zlib

from trainer.importers.wandb_log import BLOCK

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)


def chunk(kind: int, data: bytes) -> bytes:
    crc = zlib.crc32(data, zlib.crc32(bytes([kind])))
    return struct.pack("<IHB", crc, len(data), kind) + data


def framed(records: list[bytes]) -> bytes:
    """A transaction log holding ``records``, framed as leveldb's log writer does."""
    out = bytearray(HEADER)
    for record in records:
        rest, first = record, True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\0" * left
                continue
            room = left - 7
            piece, rest = rest[:room], rest[room:]
            last = not rest
            kind = (1 if last else 2) if first else (4 if last else 3)
            out += chunk(kind, piece)
            first = False
            if last:
                break
    return bytes(out)
