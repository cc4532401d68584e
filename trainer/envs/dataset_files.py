"""Reading a dataset of prompts and reference answers: JSONL, Parquet or CSV.

A row's prompt is a string or a list of chat messages (``{"role", "content"}``); its
answer is a string (a number is turned into its text). The first bad row is reported
with its line (or row) number and the field at fault; nothing here guesses. Parquet
needs ``pyarrow`` (optional: a clear error names it when it is missing).

Files are read a record at a time, each held to :class:`~trainer.envs.row_limits.RowLimits`
before it is parsed (:func:`iter_records`); :func:`read_rows` keeps the validated rows.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainer.envs.row_limits import (
    TRAINER_LIMITS,
    DatasetError,
    Lines,
    RowLimitError,
    RowLimits,
    check_json_shape,
    check_value_shape,
)

ROLES = ("system", "user", "assistant", "tool")
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}
_PARQUET_BATCH = 64  # rows converted to Python at a time


@dataclass(frozen=True)
class Row:
    """One example: ``line`` is its line (JSONL/CSV) or row number (Parquet), from 1."""

    line: int
    id: str
    prompt: str
    messages: tuple[Mapping[str, str], ...]
    answer: str


def read_rows(
    path: str,
    *,
    fmt: str = "auto",
    prompt_key: str = "prompt",
    answer_key: str = "answer",
    id_key: str | None = None,
    max_rows: int = 1_000_000,
    limits: RowLimits = TRAINER_LIMITS,
) -> list[Row]:
    """Every row of the file, validated; raises :class:`DatasetError`."""
    fmt = file_format(path, fmt)
    limits = replace(limits, max_rows=min(max_rows, limits.max_rows))
    rows = [
        row_of(line, raw, prompt_key, answer_key, id_key, fmt)
        for line, raw in iter_records(path, fmt=fmt, limits=limits)
    ]
    if not rows:
        raise DatasetError(f"path: {path!r} holds no rows")
    return rows


def file_format(path: str, fmt: str = "auto") -> str:
    """``fmt``, or for ``auto`` the format the extension names; the path must be a
    file."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"path: {path!r} is not a file")
    if fmt == "auto":
        fmt = FORMATS.get(p.suffix.lower(), "")
        if not fmt:
            raise DatasetError(
                f"format: cannot tell the format of {p.name!r} from its extension "
                "(.jsonl, .parquet, .csv); set format"
            )
    return fmt


def iter_records(
    path: str, *, fmt: str, limits: RowLimits = TRAINER_LIMITS
) -> Iterator[tuple[int, Any]]:
    """``(line or row number, the record as parsed)``, one at a time, each checked
    against ``limits`` before it is parsed (:mod:`trainer.envs.row_limits`)."""
    p = Path(path)
    if fmt == "parquet":
        records = _parquet(p, limits)
    else:
        records = (_jsonl if fmt == "jsonl" else _csv)(p, limits)
    for count, (line, raw) in enumerate(records, 1):
        if count > limits.max_rows:
            raise RowLimitError(_where(fmt, line), "max_rows", limits.max_rows)
        yield line, raw


def _where(fmt: str, line: int) -> str:
    return f"row {line}" if fmt == "parquet" else f"line {line}"


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"path: {where} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


# A JSON escape of a UTF-16 surrogate: the one way a lone one (no text) gets in.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _check_text(value: Any, where: str) -> None:
    """Every string in ``value`` is text: a lone surrogate (``\\ud800`` alone) is
    not, and nothing could store or show it."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise DatasetError(
                    f"path: {where} has a lone surrogate escape (\\ud800-\\udfff "
                    "without its pair), which is no text"
                ) from None


def _jsonl(p: Path, limits: RowLimits) -> Iterator[tuple[int, Any]]:
    with p.open("rb") as fh:
        lines = Lines(fh, limits)
        for raw in lines:
            lines.end_record()
            if not raw.strip():
                continue
            where = f"line {lines.line}"
            check_json_shape(raw, where, limits)
            line = _text(raw, where)
            try:
                value = json.loads(line)
            except ValueError as exc:  # and an int past Python's 4,300 digits
                why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise DatasetError(f"path: {where} is not valid JSON ({why})") from None
            if _SURROGATE.search(raw):
                _check_text(value, where)
            yield lines.line, value


def _csv(p: Path, limits: RowLimits) -> Iterator[tuple[int, Any]]:
    with p.open("rb") as fh:
        lines = Lines(fh, limits)
        reader = csv.DictReader(_text(raw, f"line {lines.line}") for raw in lines)
        try:
            if reader.fieldnames is None:
                return
            lines.end_record()
            for raw in reader:
                lines.end_record()
                fields = len(raw) + len(raw.get(None) or ())  # None: the extra ones
                if fields > limits.max_row_values:
                    where = f"line {reader.line_num}"
                    raise RowLimitError(where, "max_row_values", limits.max_row_values)
                yield reader.line_num, raw
        except csv.Error as exc:
            raise DatasetError(
                f"path: line {lines.line} is not valid CSV ({exc})"
            ) from None


def _parquet(p: Path, limits: RowLimits) -> Iterator[tuple[int, Any]]:
    """Rows of a Parquet file, a few at a time. Its metadata is checked first: the
    row count, and each row group's decoded size against ``max_row_bytes`` a row on
    average (the file's own word, so only a first check); then each row once decoded
    (its values, nesting and size) and the rows' size in all (``max_decoded_bytes``:
    a value repeated through a dictionary decodes once a row)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(
            "format: reading Parquet needs the pyarrow package, which is not "
            "installed; install it or convert the file to JSONL or CSV"
        ) from None
    try:
        # Text columns stay dictionary-encoded in memory: a value repeated through
        # a dictionary is held once until a row is taken out (below).
        text = [f.name for f in pq.read_schema(p) if _is_text(f.type)]
        pf = pq.ParquetFile(p, read_dictionary=text)
    except Exception as exc:  # pyarrow raises its own error types
        raise DatasetError(f"path: not a readable Parquet file ({exc})") from None
    meta = pf.metadata
    if meta.num_rows > limits.max_rows:
        raise RowLimitError(f"row {limits.max_rows + 1}", "max_rows", limits.max_rows)
    first = 1
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.total_byte_size > max(group.num_rows, 1) * limits.max_row_bytes:
            where = f"rows {first} to {first + group.num_rows - 1}"
            raise RowLimitError(where, "max_row_bytes", limits.max_row_bytes)
        first += group.num_rows
    line = total = 0
    try:
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH):
            # Each row's text measured in Arrow before any row becomes Python.
            for k, size in enumerate(_text_bytes(batch)):
                if size > limits.max_row_bytes:
                    where, limit = f"row {line + k + 1}", limits.max_row_bytes
                    raise RowLimitError(where, "max_row_bytes", limit)
            for k in range(batch.num_rows):
                raw = batch.slice(k, 1).to_pylist()[0]
                line += 1
                total += check_value_shape(raw, f"row {line}", limits)
                if total > limits.max_decoded_bytes:
                    where = f"rows 1 to {line}"
                    limit = limits.max_decoded_bytes
                    raise RowLimitError(where, "max_decoded_bytes", limit)
                yield line, raw
    except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
        if isinstance(exc, DatasetError):
            raise
        raise DatasetError(f"path: row {line + 1} cannot be read ({exc})") from None


def _is_text(arrow_type: Any) -> bool:
    """A string or binary Arrow type."""
    import pyarrow.types as t

    return any(
        is_(arrow_type)
        for is_ in (t.is_string, t.is_large_string, t.is_binary, t.is_large_binary)
    )


def _text_bytes(batch: Any) -> list[int]:
    """Each row's bytes of text in its top-level text columns (dictionary-encoded
    ones through their dictionary), computed in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = [0] * batch.num_rows
    for col in batch.columns:
        if pa.types.is_dictionary(col.type):
            lengths = pc.binary_length(col.dictionary).take(col.indices)
        elif _is_text(col.type):
            lengths = pc.binary_length(col)
        else:
            continue
        for k, n in enumerate(pc.fill_null(lengths, 0).to_pylist()):
            total[k] += n
    return total


def _fields(raw: dict) -> str:
    """The fields a record has, for a message that says which one is missing."""
    names = [str(k)[:40] for k in list(raw)[:8] if str(k)]
    if not names:
        return " (it has no fields)"
    more = ", ..." if len(raw) > 8 else ""
    return f" (its fields: {', '.join(names)}{more})"


def row_of(
    line: int, raw: Any, prompt_key: str, answer_key: str, id_key: str | None, fmt: str
) -> Row:
    """The record at ``line`` as a :class:`Row`, or the :class:`DatasetError` naming
    the field at fault."""
    where = _where(fmt, line)
    if not isinstance(raw, dict):
        raise DatasetError(f"path: {where} is not an object")
    if prompt_key not in raw or raw[prompt_key] in (None, ""):
        raise DatasetError(
            f"prompt_key: {where} has no {prompt_key!r} field{_fields(raw)}"
        )
    if answer_key not in raw or raw[answer_key] is None:
        raise DatasetError(
            f"answer_key: {where} has no {answer_key!r} field{_fields(raw)}"
        )
    prompt, messages = _prompt(raw[prompt_key], where, prompt_key)
    answer = raw[answer_key]
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise DatasetError(
            f"answer_key: {where}: {answer_key!r} must be text or a number"
        )
    if id_key and id_key not in raw:  # a misspelt key: no id ever, said at once
        raise DatasetError(f"id_key: {where} has no {id_key!r} field{_fields(raw)}")
    row_id = str(raw.get(id_key, "")) if id_key else ""
    return Row(line, row_id or f"{fmt}-{line}", prompt, messages, str(answer))


def _prompt(
    value: Any, where: str, key: str
) -> tuple[str, tuple[Mapping[str, str], ...]]:
    """(prompt text, chat messages); a plain string has no messages of its own."""
    if isinstance(value, str):
        return value, ()
    if isinstance(value, list) and value:
        msgs = []
        for i, m in enumerate(value):
            if (
                not isinstance(m, dict)
                or m.get("role") not in ROLES
                or not isinstance(m.get("content"), str)
            ):
                raise DatasetError(
                    f"prompt_key: {where}: message {i} needs a role "
                    f"({', '.join(ROLES)}) and a text content"
                )
            msgs.append({"role": m["role"], "content": m["content"]})
        users = [m["content"] for m in msgs if m["role"] == "user"]
        return (users[-1] if users else msgs[-1]["content"]), tuple(msgs)
    raise DatasetError(
        f"prompt_key: {where}: {key!r} must be a string or a list of chat messages"
    )
