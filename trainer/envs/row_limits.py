"""How big one row of a dataset file may be, checked before the row is parsed.

A file is read one bounded line at a time (:class:`Lines`: never more than
``row_bytes`` + 1 bytes in hand), and a JSON row's bytes are pre-scanned for the values
it holds and how deep it nests (:func:`check_json_shape`) before ``json.loads`` sees
them: a row of a million nested empty lists costs a count over its bytes, not the
gigabyte of lists (or the ``RecursionError``) a parse would. The defaults are the
ceilings the trainer itself reads with; the platform's upload limits are at most
these, so whatever an upload accepted, a run reads. :class:`DatasetError` lives here
so that a row over a limit is one (:mod:`trainer.envs.dataset_files` re-exports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, BinaryIO

# A JSON string with its escapes (the unrolled form: no backtracking on long strings).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_EMPTY = re.compile(rb"\[\s*\]|\{\s*\}")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


@dataclass(frozen=True)
class RowLimits:
    """The most one row may hold (field names are the limits' names in errors)."""

    max_row_bytes: int = 16 << 20
    """Bytes of one line (JSONL) or one record (CSV), its line ending included."""
    max_row_depth: int = 256
    """Nesting of lists and objects in one JSON row; the top-level object is 1."""
    max_row_values: int = 1_000_000
    """Values in one JSON row (objects, lists, strings, numbers, literals), or
    fields in one CSV record."""
    max_rows: int = 10_000_000
    """Rows in the whole file."""
    max_decoded_bytes: int = 8 << 30
    """Bytes of the whole file's rows once decoded (Parquet: compression and
    dictionary encoding let a file of a few hundred bytes hold gigabytes of text,
    which a run would hold in memory)."""


TRAINER_LIMITS = RowLimits()


class DatasetError(ValueError):
    """A dataset that cannot be read; the message starts with the field at fault."""


class RowLimitError(DatasetError):
    """A row (or the file) over one of :class:`RowLimits`: ``where`` (``line 3``),
    ``limit`` (the field of :class:`RowLimits`) and its ``value``."""

    _TEXT = {
        "max_row_bytes": ("is longer than the limit of", "bytes"),
        "max_row_depth": ("nests deeper than the limit of", "levels"),
        "max_row_values": ("holds more than the limit of", "values"),
        "max_rows": ("is past the limit of", "rows"),
        "max_decoded_bytes": ("hold more once decoded than the limit of", "bytes"),
    }

    def __init__(self, where: str, limit: str, value: int) -> None:
        self.where, self.limit, self.value = where, limit, value
        super().__init__(self.describe())

    def describe(self, amount: str | None = None, name: str | None = None) -> str:
        """``path: line 3 is longer than the limit of AMOUNT (NAME)``; a caller may
        give the amount (``1 MB``) and the limit's name (a setting) its own way."""
        text, unit = self._TEXT[self.limit]
        amount = amount or f"{self.value} {unit}"
        return f"path: {self.where} {text} {amount} ({name or self.limit})"


def blank_strings(raw: bytes | bytearray) -> bytes:
    """``raw`` JSON with each string a ``0``: its commas and brackets are the
    document's own (exact for JSON that parses)."""
    return _STRING.sub(b"0", raw)


def check_json_shape(raw: bytes, where: str, limits: RowLimits) -> None:
    """Refuse a JSON row holding more values or nesting deeper than ``limits``,
    counting over its bytes (strings blanked first, so brackets in text do not count).

    For text that parses, the counts are exact: strings are found left to right as
    the parser finds them. For text that does not, they hold up to the first error,
    which is as far as a parser gets.
    """
    bare = blank_strings(raw)
    opened = bare.count(b"[") + bare.count(b"{")
    # values = the top one + one per comma + the first child of each non-empty
    # container; the empty ones are counted only when the bound is not enough.
    values = 1 + bare.count(b",") + opened
    if values > limits.max_row_values:
        values -= len(_EMPTY.findall(bare))
    if values > limits.max_row_values:
        raise RowLimitError(where, "max_row_values", limits.max_row_values)
    if opened <= limits.max_row_depth:
        return
    brackets = bare.translate(None, _NOT_BRACKETS)
    if max(accumulate(_STEP[b] for b in brackets)) > limits.max_row_depth:
        raise RowLimitError(where, "max_row_depth", limits.max_row_depth)


def check_value_shape(value: Any, where: str, limits: RowLimits) -> int:
    """The same limits for a row already decoded (Parquet): its values, nesting and
    size, walked without recursion and abandoned at the first limit passed. Returns
    its size: the UTF-8 bytes of its strings (keys too) and bytes, 8 a value else."""
    stack, values, size = [(value, 1)], 0, 0
    while stack:
        item, depth = stack.pop()
        values += 1
        if values > limits.max_row_values:
            raise RowLimitError(where, "max_row_values", limits.max_row_values)
        if isinstance(item, str):
            size += len(item.encode("utf-8", "surrogatepass"))
        elif isinstance(item, bytes | bytearray):
            size += len(item)
        else:
            size += 8
        if size > limits.max_row_bytes:
            raise RowLimitError(where, "max_row_bytes", limits.max_row_bytes)
        if isinstance(item, dict | list | tuple):
            if depth > limits.max_row_depth:
                raise RowLimitError(where, "max_row_depth", limits.max_row_depth)
            if isinstance(item, dict):  # its keys' bytes (not values of their own)
                size += sum(len(str(k).encode("utf-8", "surrogatepass")) for k in item)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    if size > limits.max_row_bytes:  # a last object's keys
        raise RowLimitError(where, "max_row_bytes", limits.max_row_bytes)
    return size


class Lines:
    """The lines of a binary file, each at most ``max_row_bytes``: a longer one is
    refused having read one byte past the limit. ``line`` is the number of the last
    line read; ``record_bytes`` counts the bytes since :meth:`end_record` (a CSV
    record may span lines) and is held to the same limit."""

    def __init__(self, fh: BinaryIO, limits: RowLimits) -> None:
        self.fh, self.cap = fh, limits.max_row_bytes
        self.line = 0
        self.record_bytes = 0

    def __iter__(self) -> Lines:
        return self

    def __next__(self) -> bytes:
        raw = self.fh.readline(self.cap + 1)
        if not raw:
            raise StopIteration
        self.line += 1
        self.record_bytes += len(raw)
        if self.record_bytes > self.cap:
            raise RowLimitError(f"line {self.line}", "max_row_bytes", self.cap)
        return raw

    def end_record(self) -> None:
        self.record_bytes = 0
