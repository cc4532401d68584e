"""Reading a dataset of prompts and reference answers: JSONL, Parquet or CSV.

A row's prompt is a string or a list of chat messages (``{"role", "content"}``); its
answer is a string (a number is turned into its text). The first bad row is reported
with its line (or row) number and the field at fault; nothing here guesses. Parquet
needs ``pyarrow`` (optional: a clear error names it when it is missing).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}


class DatasetError(ValueError):
    """A dataset that cannot be read; the message starts with the field at fault."""


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
) -> list[Row]:
    """Every row of the file, validated; raises :class:`DatasetError`."""
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
    reader = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}[fmt]
    rows = []
    for line, raw in reader(p):
        if len(rows) >= max_rows:
            raise DatasetError(f"path: more than max_rows={max_rows} rows")
        rows.append(_row(line, raw, prompt_key, answer_key, id_key, fmt))
    if not rows:
        raise DatasetError(f"path: {path!r} holds no rows")
    return rows


def _where(fmt: str, line: int) -> str:
    return f"row {line}" if fmt == "parquet" else f"line {line}"


def _jsonl(p: Path) -> Iterator[tuple[int, Any]]:
    with p.open(encoding="utf-8") as fh:
        for n, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                yield n, json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"path: line {n} is not valid JSON ({exc.msg})"
                ) from None


def _csv(p: Path) -> Iterator[tuple[int, Any]]:
    with p.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        for raw in reader:
            yield reader.line_num, raw


def _parquet(p: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(
            "format: reading Parquet needs the pyarrow package, which is not "
            "installed; install it or convert the file to JSONL or CSV"
        ) from None
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises its own error types
        raise DatasetError(f"path: not a readable Parquet file ({exc})") from None
    yield from enumerate(table.to_pylist(), 1)


def _row(
    line: int, raw: Any, prompt_key: str, answer_key: str, id_key: str | None, fmt: str
) -> Row:
    where = _where(fmt, line)
    if not isinstance(raw, dict):
        raise DatasetError(f"path: {where} is not an object")
    if prompt_key not in raw or raw[prompt_key] in (None, ""):
        raise DatasetError(f"prompt_key: {where} has no {prompt_key!r} field")
    if answer_key not in raw or raw[answer_key] is None:
        raise DatasetError(f"answer_key: {where} has no {answer_key!r} field")
    prompt, messages = _prompt(raw[prompt_key], where, prompt_key)
    answer = raw[answer_key]
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise DatasetError(
            f"answer_key: {where}: {answer_key!r} must be text or a number"
        )
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
