"""Make untrusted event payloads storable and JSON-encodable.

JSON has no NaN/inf and PostgreSQL rejects NUL characters in text and jsonb, so before
anything reaches a JSON column, a text column or a response: non-finite floats become
the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (the same spelling as
``trainer.events.JsonlSink``), NUL becomes U+FFFD and lone surrogates become ``?``. Text is never marked safe;
templates and the websocket only ever see it JSON- or HTML-escaped.
"""

from __future__ import annotations

import math
from typing import Any

NAN, POS_INF, NEG_INF = "NaN", "Infinity", "-Infinity"
_MAX_DEPTH = 64


def num(value: Any) -> float | str | None:
    """A float for JSON: finite floats unchanged, non-finite ones as strings."""
    if type(value) is float and value - value == 0.0:  # finite (inf - inf is nan)
        return value
    if value is None:
        return None
    value = to_float(value) if isinstance(value, int) else float(value)
    if math.isfinite(value):
        return value
    return NAN if math.isnan(value) else (POS_INF if value > 0 else NEG_INF)


def to_float(value: Any) -> float:
    """Parse a number, including the strings :func:`num` writes; NaN when unusable."""
    if type(value) is float:
        return value
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # an int past the float range
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        try:
            return float(value)  # accepts "NaN", "Infinity", "-Infinity"
        except ValueError:
            return math.nan
    return math.nan


def text(value: Any, limit: int | None = None) -> str:
    """A storable string: NUL and lone surrogates (not encodable as UTF-8) replaced."""
    if type(value) is str and value.isascii() and "\x00" not in value:
        return value[:limit] if limit is not None else value  # the common case
    s = value if isinstance(value, str) else ("" if value is None else str(value))
    if "\x00" in s:
        s = s.replace("\x00", "\ufffd")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "replace").decode("utf-8")
    return s[:limit] if limit is not None else s


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as it is (NUL, lone surrogates), or None: the
    check for input that is refused rather than repaired (names, configs, filters)."""
    if "\x00" in value:
        return "must not contain NUL characters"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "must not contain lone surrogates (not valid UTF-8)"
    return None


def opt_text(value: Any, limit: int | None = None) -> str | None:
    return None if value is None else text(value, limit)


def clean(value: Any, _depth: int = 0, *, keep_objects: bool = False) -> Any:
    """A JSON-safe deep copy (dict keys become strings; too-deep nesting is cut).
    Other objects become strings, or stay as they are with ``keep_objects`` (for an
    encoder that knows them: datetimes, UUIDs)."""
    if _depth > _MAX_DEPTH:
        return None
    if isinstance(value, float):
        return num(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {
            text(k): clean(v, _depth + 1, keep_objects=keep_objects)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [clean(v, _depth + 1, keep_objects=keep_objects) for v in value]
    return value if keep_objects else text(value)


def as_int(value: Any, default: int = 0) -> int:
    """An int from an untrusted value (bool as 0/1; out-of-range or other: default)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and -(2**31) <= value < 2**31:
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**31:
        return int(value)
    return default
