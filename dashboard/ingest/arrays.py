"""Compact storage of a trajectory's per-token arrays.

A trajectory's segments are stored as JSON metadata (turn, kind, text, tokens, mask,
``n`` tokens, the ``branch`` of a branched conversation) plus one ``bytes`` blob: for each segment in order, ``n`` little-endian
``int32`` token ids, then ``n`` ``float32`` values for each of :data:`FLOAT_FIELDS`,
then for each of the segment's own ``series`` (the per-token arrays another trainer
keeps beyond ours, named in the metadata, in order: prime-rl's ``mismatch_kl``,
miles's ``ref_log_probs``...) ``n`` more. That is 24 bytes a token (4 more a series)
instead of ~100 as JSON text; float32 keeps NaN (the logprob of prompt tokens) and
loses nothing a chart can show. A segment stored before series existed has none, so
its bytes read as they always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dashboard import jsonsafe
from trainer.event_schema import MAX_SERIES, SERIES_NAME

FLOAT_FIELDS = ("logprob", "old_logprob", "ratio", "entropy", "advantage")
_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")
_MAX_TOKEN_STR = 200


def series_of(seg: dict[str, Any]) -> dict[str, Any]:
    """A sent segment's extra per-token arrays: ``{name: values}``, the names
    :data:`~trainer.event_schema.SERIES_NAME` allows, the first
    :data:`~trainer.event_schema.MAX_SERIES`."""
    series = seg.get("series")
    if not isinstance(series, dict):
        return {}
    named = (
        (k, v)
        for k, v in series.items()
        if isinstance(k, str) and SERIES_NAME.fullmatch(k) and isinstance(v, list)
    )
    return dict(list(named)[:MAX_SERIES])


def series_names(meta: dict[str, Any]) -> list[str]:
    names = meta.get("series")
    return [str(n) for n in names] if isinstance(names, list) else []


def part_size(meta: dict[str, Any]) -> int:
    """Bytes one segment's arrays take in the blob."""
    columns = 1 + len(FLOAT_FIELDS) + len(series_names(meta))
    return 4 * columns * int(meta.get("n", 0))


def _floats(values: Any, n: int) -> np.ndarray:
    """``n`` float32 values; a missing or short array is padded with NaN."""
    out = np.full(n, np.nan, dtype=_F32)
    if isinstance(values, (list, tuple)) and values:
        vals = values[:n]
        try:  # the common case: a flat list of numbers (numpy also reads "NaN")
            arr = np.asarray(vals, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            arr = np.asarray([jsonsafe.to_float(v) for v in vals], dtype=np.float64)
        if arr.ndim != 1:
            arr = np.asarray([jsonsafe.to_float(v) for v in vals], dtype=np.float64)
        with np.errstate(over="ignore"):
            out[: len(arr)] = arr.astype(_F32)
    return out


def _ids(values: Any, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=_I32)
    if isinstance(values, (list, tuple)) and values:
        vals = values[:n]
        try:
            arr = np.asarray(vals, dtype=np.int64)
            ok = arr.ndim == 1 and all(type(v) is int for v in vals[:1])
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            ints = [
                v if isinstance(v, int) and not isinstance(v, bool) else -1
                for v in vals
            ]
            arr = np.asarray(
                [v if -(2**31) <= v < 2**31 else -1 for v in ints], dtype=np.int64
            )
        arr = np.where((arr >= -(2**31)) & (arr < 2**31), arr, -1)
        out[: len(arr)] = arr.astype(_I32)
    return out


def pack_segment_list(
    segments: Sequence[dict[str, Any]],
) -> list[tuple[dict[str, Any], bytes]]:
    """Each event segment as (JSON metadata, its packed arrays). A trajectory whose
    segments carry no token arrays at all (the recording policy's ``token_arrays``
    off: ``text`` and ``n`` only) packs no bytes."""
    segs = [s for s in (segments if isinstance(segments, (list, tuple)) else [])]
    segs = [s for s in segs if isinstance(s, dict)]
    with_arrays = any(
        isinstance(s.get("token_ids"), (list, tuple))
        or isinstance(s.get("tokens"), (list, tuple))
        for s in segs
    )
    out = []
    for seg in segs:
        ids = seg.get("token_ids")
        tokens = seg.get("tokens")
        n = max(
            len(ids) if isinstance(ids, (list, tuple)) else 0,
            len(tokens) if isinstance(tokens, (list, tuple)) else 0,
        )
        if not with_arrays:  # counted, not listed
            given = seg.get("n")
            n = given if type(given) is int and 0 <= given < 2**31 else 0
        meta = {
            "turn": seg.get("turn") if isinstance(seg.get("turn"), int) else None,
            "kind": jsonsafe.text(seg.get("kind"), 32),
            "text": jsonsafe.text(seg.get("text")),
            "tokens": [jsonsafe.text(t, _MAX_TOKEN_STR) for t in (tokens or [])][:n],
            "mask": jsonsafe.opt_text(seg.get("mask"), 64),
            "n": n,
            **_readable(seg, n),
        }
        branch = seg.get("branch")
        if type(branch) is int and 0 <= branch < 2**31:
            meta["branch"] = branch
        if not with_arrays:
            out.append((meta, b""))
            continue
        series = series_of(seg)
        if series:
            meta["series"] = list(series)
        chunks = [_ids(ids, n).tobytes()]
        chunks.extend(_floats(seg.get(name), n).tobytes() for name in FLOAT_FIELDS)
        chunks.extend(_floats(values, n).tobytes() for values in series.values())
        out.append((meta, b"".join(chunks)))
    return out


def _readable(seg: dict[str, Any], n: int) -> dict[str, Any]:
    """A segment's readable tokens (``token_text``, ``special``, ``turns``) and its
    single masked tokens (``masked``: [[position, reason]]), where its sender gave
    them: texts cut like pieces, positions kept inside the segment."""
    out: dict[str, Any] = {}
    texts = seg.get("token_text")
    if isinstance(texts, (list, tuple)) and texts:
        out["token_text"] = [jsonsafe.text(t, _MAX_TOKEN_STR) for t in texts][:n]
    special = seg.get("special")
    if isinstance(special, (list, tuple)) and special:
        out["special"] = [p for p in special if type(p) is int and 0 <= p < n]
    turns = seg.get("turns")
    if isinstance(turns, (list, tuple)) and turns:
        out["turns"] = [
            [t[0], jsonsafe.text(t[1], 32)]
            for t in turns
            if isinstance(t, (list, tuple))
            and len(t) == 2
            and type(t[0]) is int
            and 0 <= t[0] < n
        ]
    masked = seg.get("masked")
    if isinstance(masked, (list, tuple)) and masked:
        out["masked"] = [
            [t[0], jsonsafe.text(t[1], 32)]
            for t in masked
            if isinstance(t, (list, tuple))
            and len(t) == 2
            and type(t[0]) is int
            and 0 <= t[0] < n
        ]
    return out


def pack_segments(
    segments: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], bytes]:
    """Split event segments into (JSON metadata, packed arrays)."""
    parts = pack_segment_list(segments)
    return [m for m, _ in parts], b"".join(b for _, b in parts)


def unpack_segments(
    meta: Sequence[dict[str, Any]], blob: bytes | memoryview
) -> list[dict[str, Any]]:
    """The inverse of :func:`pack_segments`, JSON-ready (non-finite floats as strings,
    floats rounded to 6 significant digits); a segment's extra arrays under
    ``series`` (``{name: values}``, only where it has some). Without arrays (not
    recorded, or pruned) each array is None."""
    buf = bytes(blob or b"")
    offset = 0
    out = []
    if len(buf) < sum(part_size(s) for s in meta):
        for seg in meta:
            item = {k: v for k, v in seg.items() if k != "n"}
            item["token_ids"] = None
            item.update(dict.fromkeys(FLOAT_FIELDS))
            if series_names(seg):
                item["series"] = dict.fromkeys(series_names(seg))
            out.append(item)
        return out
    for seg in meta:
        n = int(seg.get("n", 0))
        item = {k: v for k, v in seg.items() if k != "n"}
        item["token_ids"] = np.frombuffer(buf, _I32, n, offset).tolist()
        offset += 4 * n
        columns = [(item, name) for name in FLOAT_FIELDS]
        if series_names(seg):
            item["series"] = {}
            columns += [(item["series"], name) for name in series_names(seg)]
        for into, name in columns:
            arr = np.frombuffer(buf, _F32, n, offset).astype(np.float64)
            offset += 4 * n
            into[name] = [jsonsafe.num(float(f"{v:.6g}")) for v in arr.tolist()]
        out.append(item)
    return out


def head_of_part(
    meta: dict[str, Any], blob: bytes, keep: int
) -> tuple[dict[str, Any], bytes]:
    """One segment's (metadata, packed arrays) cut to its first ``keep`` tokens, without
    unpacking the rest (a reader's page of a long segment)."""
    n = int(meta.get("n", 0))
    if keep >= n:
        return meta, blob
    cut = {**meta, "n": keep}
    for name in ("tokens", "token_text"):
        if isinstance(meta.get(name), list):
            cut[name] = meta[name][:keep]
    if isinstance(meta.get("special"), list):
        cut["special"] = [p for p in meta["special"] if p < keep]
    for name in ("turns", "masked"):
        if isinstance(meta.get(name), list):
            cut[name] = [t for t in meta[name] if t[0] < keep]
    if len(blob) < part_size(meta):  # no arrays stored
        return cut, blob
    columns = 1 + len(FLOAT_FIELDS) + len(series_names(meta))
    return cut, b"".join(blob[4 * n * c : 4 * (n * c + keep)] for c in range(columns))
