"""An events request's body, read within its limits: decompressed (gzip, deflate)
while its size, lines and JSON values are counted, then parsed line by line and
checked against the event schema, every bad line named (``line 3: metrics.reward:
Input should be a valid number``). Nothing here writes; :mod:`dashboard.runs.external`
stores what this returns.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

from django.conf import settings

from dashboard.ingest import bounds
from dashboard.runs.services import InvalidConfig, ServiceError

MAX_ERRORS = 20


class PayloadTooLarge(ServiceError):
    status = 413


# --- parsing a batch ----------------------------------------------------------------
_WBITS = {"gzip": 31, "deflate": 15}  # 31: a gzip header and trailer; 15: zlib's
_INFLATE_IN, _INFLATE_OUT = 1 << 14, 1 << 18  # small tails to copy, few calls
# A gzip body of several members (``cat a.gz b.gz``) is read whole; clients send one.
GZIP_MAX_MEMBERS = 1000


def decode_body(body: bytes, encoding: str | None) -> bytes | bytearray:
    """The request body, decompressed (gzip or deflate), within the size limits: the
    decompressed size is counted while it is produced, and the body refused as soon as
    it passes ``EVENTS_MAX_DECODED_BYTES``, never after."""
    if len(body) > settings.EVENTS_MAX_BODY_BYTES:
        raise PayloadTooLarge(
            f"body: {len(body)} bytes, more than {settings.EVENTS_MAX_BODY_BYTES}; "
            "send smaller batches"
        )
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in _WBITS:
        raise InvalidConfig(f"Content-Encoding: {encoding!r} is not gzip or deflate")
    try:
        return _inflate(body, _WBITS[encoding], settings.EVENTS_MAX_DECODED_BYTES)
    except zlib.error as exc:
        raise InvalidConfig(f"body: not valid {encoding} data ({exc})") from None


def _inflate(data: bytes, wbits: int, limit: int) -> bytearray:
    """``data`` decompressed (every member of a multi-member gzip, at most
    ``GZIP_MAX_MEMBERS``), at most ``limit`` bytes: input goes in ``_INFLATE_IN``
    bytes at a time, output comes out at most ``_INFLATE_OUT`` bytes at a time and is
    counted as it comes, its lines and values too (:class:`Tally`: a bomb of newlines
    or zeros stops within its first chunks). Each member is read where it starts in
    ``data`` (the rest is never copied), so the work is linear in the body."""
    out, tally = bytearray(), Tally()
    view = memoryview(data)
    start = 0
    for _member in range(GZIP_MAX_MEMBERS):
        d, pending, pos = zlib.decompressobj(wbits), b"", start
        while not d.eof:
            if not pending and pos < len(view):
                pending, pos = view[pos : pos + _INFLATE_IN], pos + _INFLATE_IN
            chunk = d.decompress(pending, _INFLATE_OUT)
            pending = d.unconsumed_tail
            out += chunk
            if len(out) > limit:
                raise PayloadTooLarge(
                    f"body: more than {limit} bytes once decompressed (the limit, "
                    "EVENTS_MAX_DECODED_BYTES); send smaller batches"
                )
            tally.add(chunk)
            if not (d.eof or chunk or pending) and pos >= len(view):
                raise zlib.error("the compressed stream ends early")
        # What the last input held past this member's end is the next one's start.
        start = min(pos, len(view)) - len(d.unused_data)
        if wbits != 31 or _only_padding(view[start:]):  # gzip members may follow
            return out
    raise PayloadTooLarge(
        f"body: more than {GZIP_MAX_MEMBERS} gzip members; send one stream a batch"
    )


def _only_padding(rest: memoryview) -> bool:
    """Nothing but NUL bytes (or nothing) is left: the trailing padding some
    writers add after a gzip stream. Read once, at the end: a member starts with
    its magic number, never NUL."""
    return not len(rest) or (rest[0] == 0 and not bytes(rest).strip(b"\x00"))


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` one at a time (no list of every line at once)."""
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        yield text[pos:end]
        pos = end + 1


class Tally:
    """The lines and JSON values of a body, counted a chunk at a time, refused (413)
    as soon as either passes its limit, before anything is parsed. Values (array
    items, object members) are counted by the body's commas and opening brackets,
    strings' included, which counts no fewer than there are: what bounds the objects
    a body unfolds into (a 2-byte ``0,`` becomes an 8-byte pointer, a packed
    24-byte token)."""

    def __init__(self) -> None:
        self.newlines = self.values = 0

    def add(self, chunk: bytes | bytearray) -> None:
        self.newlines += chunk.count(b"\n")
        self.values += json_values(chunk)
        self._check(self.newlines)

    def done(self, data: bytes | bytearray) -> None:
        # A final newline ends the last line, it does not start another: 5,001 lines
        # are refused with or without one.
        self._check(self.newlines + (bool(data) and not data.endswith(b"\n")))

    def _check(self, lines: int) -> None:
        if lines > settings.EVENTS_MAX_LINES:
            raise PayloadTooLarge(
                f"body: more than {settings.EVENTS_MAX_LINES} lines (the limit, "
                "EVENTS_MAX_LINES); send smaller batches"
            )
        if self.values > settings.EVENTS_MAX_VALUES:
            raise PayloadTooLarge(
                f"body: {self.values:,}+ JSON values (commas and brackets), more than "
                f"the limit of {settings.EVENTS_MAX_VALUES:,} (EVENTS_MAX_VALUES); "
                "send smaller batches"
            )


def json_values(data: bytes | bytearray) -> int:
    """No fewer than the JSON values (array items, object members) ``data`` holds:
    its commas and opening brackets, strings' included."""
    return data.count(b",") + data.count(b"[") + data.count(b"{")


def check_values(data: bytes | bytearray) -> None:
    """Refuse (413) a JSON body of more values than ``EVENTS_MAX_VALUES``, before it
    is parsed (a 30 MB body of ``{},`` unfolds into ~800 MB of objects). Commas and
    brackets inside strings (tool calls' JSON, LaTeX in a completion) are not values:
    a body over the limit by its every comma is counted again, its strings blanked."""
    tally = Tally()
    tally.values = json_values(data)
    if tally.values > settings.EVENTS_MAX_VALUES:
        from trainer.envs.row_limits import blank_strings

        tally.values = json_values(blank_strings(data))
    tally._check(0)


def check_size(data: bytes | bytearray) -> None:
    """Refuse a body with more lines or JSON values than a request may carry."""
    tally = Tally()
    tally.add(data)
    tally.done(data)


class _OverLimit(Exception):
    pass


def _event(line: str) -> dict[str, Any]:
    """One line as a checked event: sizes first (no oversized array is validated),
    then the schema."""
    from trainer.event_schema import check_event

    event = json.loads(line)
    if over := bounds.excesses(event):
        raise _OverLimit(str(over[0]))
    check_event(event)
    return event


def parse_events(data: bytes | bytearray) -> list[dict[str, Any]]:
    """Every line of an NDJSON body as a checked event, or InvalidConfig listing the
    bad lines (``line 3: metrics.reward: Input should be a valid number``); a line
    past the limits of :mod:`dashboard.ingest.bounds` makes it a 413 naming them."""
    from trainer.event_schema import EventError

    check_size(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidConfig(f"body: not UTF-8 (byte {exc.start})") from None
    events, errors, too_large = [], [], False
    metric_values, limit = 0, settings.EVENTS_MAX_METRIC_VALUES
    for number, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            events.append(_event(line))
            # Refused at the line that passes the limit, not after parsing the rest:
            # a body of 990,000 values unfolded into ~150 MB before the count.
            metric_values += len(events[-1].get("metrics") or ())
            if metric_values > limit:
                check_metric_values(
                    metric_values, f"body (by line {number})", plus=True
                )
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc.msg} at column {exc.colno})")
        except _OverLimit as exc:
            too_large = True
            errors.append(f"line {number}: {exc}")
        except (EventError, RecursionError) as exc:
            errors.append(f"line {number}: {exc}")
        except ValueError as exc:  # an integer past Python's digit limit
            errors.append(f"line {number}: not JSON ({exc})")
        if len(errors) >= MAX_ERRORS:
            errors.append("(further lines not checked)")
            break
    if errors:
        raise (PayloadTooLarge if too_large else InvalidConfig)(errors)
    return events


def check_metric_values(
    count: int,
    field: str,
    error: type[ServiceError] = PayloadTooLarge,
    *,
    plus: bool = False,
) -> None:
    """Refuse (413, or ``error``) a request whose events carry more metric values
    than ``EVENTS_MAX_METRIC_VALUES``: each is a row written under the write lock.
    ``plus``: ``count`` is what was counted before stopping, the body holds more."""
    limit = settings.EVENTS_MAX_METRIC_VALUES
    if count > limit:
        raise error(
            f"{field}: {count:,}{'+' if plus else ''} metric values, more than the "
            f"limit of {limit:,} a request (EVENTS_MAX_METRIC_VALUES); send smaller "
            "batches"
        )
