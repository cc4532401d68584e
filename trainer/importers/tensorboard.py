"""TensorBoard event files -> our ``step`` events, read without TensorFlow.

An event file (``events.out.tfevents.*``, what ``torch.utils.tensorboard`` and
transformers' ``TensorBoardCallback`` write) is a TFRecord stream: each record is a
little-endian ``uint64`` length, the masked CRC32C of those 8 bytes, the payload and
its masked CRC32C (tensorflow/core/lib/io/record_writer.cc). The payload is an
``Event`` protobuf (tensorboard/compat/proto/event.proto): ``wall_time`` (1, double),
``step`` (2, int64), ``summary`` (5) whose repeated ``value`` (1) has ``tag`` (1),
``simple_value`` (2, float) or a ``tensor`` (8, TensorProto: ``dtype`` 1, ``float_val``
5, ``double_val`` 6, ``tensor_content`` 4) with ``metadata`` (9).

Scalars are what we keep: a ``simple_value``, or a one-element float/double tensor
(the new-style scalar summaries). Text, images, histograms are skipped. A record cut
short (the writer is mid-way) waits for the next poll; a record whose CRC does not
match is an error naming the file and byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.importers.shapes import step_events
from trainer.importers.tailing import BadImportFile

EVENT_GLOB = "events.out.tfevents.*"
_DT_FLOAT, _DT_DOUBLE, _DT_STRING = 1, 2, 7


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's mask: rotate right by 15 and add a constant (crc32c.h)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(data: bytes, path: Path, base: int) -> tuple[list[bytes], int]:
    """Whole records of ``data`` (which starts at byte ``base`` of ``path``) and how
    many bytes they took; a record cut short is left for later."""
    out, pos = [], 0
    while len(data) - pos >= 12:
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if masked_crc(header) != header_crc:
            raise BadImportFile(f"{path}: byte {base + pos}: bad record length CRC")
        end = pos + 12 + length + 4
        if end > len(data):
            break
        payload = data[pos + 12 : pos + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[end - 4 : end])
        if masked_crc(payload) != payload_crc:
            raise BadImportFile(f"{path}: byte {base + pos}: bad record data CRC")
        out.append(payload)
        pos = end
    return out, pos


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of a protobuf message: varints as ints,
    fixed 64/32-bit fields as raw bytes, length-delimited ones as bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _tensor_value(buf: bytes) -> float | str | None:
    """A one-element float/double TensorProto's value, a one-element string tensor's
    text (``add_text``), None for anything else."""
    dtype, values, content, strings = 0, [], b"", []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif number == 8 and wire == 2:
            strings.append(value.decode("utf-8", errors="replace"))
        elif number in (5, 6):
            fmt, size = ("<f", 4) if number == 5 else ("<d", 8)
            raw = value
            values += [
                struct.unpack(fmt, raw[i : i + size])[0]
                for i in range(0, len(raw), size)
            ]
    if content and not values:
        if dtype == _DT_FLOAT and len(content) == 4:
            values = [struct.unpack("<f", content)[0]]
        elif dtype == _DT_DOUBLE and len(content) == 8:
            values = [struct.unpack("<d", content)[0]]
    if dtype == _DT_STRING and len(strings) == 1:
        return strings[0]
    if dtype not in (_DT_FLOAT, _DT_DOUBLE) or len(values) != 1:
        return None
    return float(values[0])


def _summary_value(buf: bytes) -> tuple[str, float | str] | None:
    tag, value = "", None
    for number, wire, raw in fields(buf):
        if number == 1 and wire == 2:
            tag = raw.decode("utf-8", errors="replace")
        elif number == 2 and wire == 5:
            value = float(struct.unpack("<f", raw)[0])
        elif number == 8 and wire == 2:
            value = _tensor_value(raw)
    return (tag, value) if tag and value is not None else None


def scalars(record: bytes) -> tuple[int, dict[str, float | str]]:
    """An Event record's step and its scalar (or text) values by tag."""
    step, values = 0, {}
    for number, wire, raw in fields(record):
        if number == 2 and wire == 0:
            step = raw if raw < 2**63 else raw - 2**64
        elif number == 5 and wire == 2:
            for n, w, value in fields(raw):
                if n == 1 and w == 2 and (found := _summary_value(value)):
                    values[found[0]] = found[1]
    return step, values


class TensorBoardReader:
    """Scalars of every event file under ``directory``; :meth:`poll` returns the
    ``step`` events of records written since the previous call (names mapped as
    ``framework``'s). Text summaries (transformers writes its ``TrainingArguments``
    as the text ``args``) are kept in :attr:`texts`, not sent."""

    def __init__(
        self, directory: str | Path, framework: str = "tensorboard", prefix: str = ""
    ) -> None:
        self.directory = Path(directory)
        self.framework = framework
        self.prefix = prefix  # dropped from every tag (TRL's ``train/``)
        self.last_step = 0
        self.texts: dict[str, str] = {}
        self._offsets: dict[Path, int] = {}

    def files(self) -> list[Path]:
        return sorted(p for p in self.directory.rglob(EVENT_GLOB) if p.is_file())

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        rows: list[tuple[int, dict[str, float]]] = []
        for path in self.files():
            offset = self._offsets.get(path, 0)
            with path.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
            try:
                records, used = read_records(data, path, offset)
                for step, values in map(scalars, records):
                    numbers = {
                        k.removeprefix(self.prefix): v
                        for k, v in values.items()
                        if isinstance(v, float)
                    }
                    self.texts.update(
                        (k, v) for k, v in values.items() if isinstance(v, str)
                    )
                    if numbers:
                        rows.append((step, numbers))
            except ValueError as exc:
                if isinstance(exc, BadImportFile):
                    raise
                raise BadImportFile(f"{path}: byte {offset}: {exc}") from None
            self._offsets[path] = offset + used
        events = step_events(self.framework, [(max(s, 0), v) for s, v in rows])
        for event in events:
            self.last_step = max(self.last_step, event["step"])
        return events

    def flush(self) -> list[dict[str, Any]]:
        return []
