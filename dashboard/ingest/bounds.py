"""What one event may hold, whoever sent it: a trajectory's tokens (and the length of
each per-token array), its segments, its agent steps (and each per-step reward list),
and the characters of any one text field (a segment's text: prompt, completion, tool
output; an agent step's action or observation; a judge's rationale). The limits are
settings (``TRAJECTORY_MAX_TOKENS``, ``TRAJECTORY_MAX_SEGMENTS``,
``TRAJECTORY_MAX_STEPS``, ``EVENT_MAX_TEXT_CHARS``), read when an event is checked.

One set of limits, two ways to apply them:

* :func:`excesses`: what is over, each naming its field and limit. The events API
  refuses a batch holding any (413), before the schema check, so no oversized array
  is ever validated or stored.
* :func:`bounded`: the event cut to the limits, with what was cut recorded under
  :data:`CLIPPED` (and a marker at the end of each cut text). ``writer.store``
  passes every event through it, so no write path stores more than the limits; for
  our own trainer's sink (whose events no one checked) this keeps the step's metrics
  and the trajectory's first tokens instead of dropping the whole batch. An event
  within the limits comes back unchanged.

Pure: dicts in, dicts out. Every value is untrusted: shapes are not assumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from django.conf import settings

from dashboard.ingest.arrays import FLOAT_FIELDS

# Where bounded() records, in a trajectory event, what it cut (the server's, never the
# sender's: bounded() always overwrites it). Stored as Trajectory.clipped.
CLIPPED = "_clipped"
MAX_NOTES = 20
PER_TOKEN = ("token_ids", "tokens", "token_text", *FLOAT_FIELDS)
# Lists of token positions (special tokens, chat turns, masked tokens): bounded like
# an array, cut by position rather than by length.
POSITIONS = ("special", "turns", "masked")
_TEXT = {"judgement": ("rationale", "raw", "error"), "run_finished": ("error",)}
_MAX_DEPTH = 64


@dataclass(frozen=True)
class Limit:
    setting: str
    unit: str

    @property
    def value(self) -> int:
        return getattr(settings, self.setting)


TOKENS = Limit("TRAJECTORY_MAX_TOKENS", "tokens")
ARRAY = Limit("TRAJECTORY_MAX_TOKENS", "values")
SEGMENTS = Limit("TRAJECTORY_MAX_SEGMENTS", "segments")
STEPS = Limit("TRAJECTORY_MAX_STEPS", "steps")
PER_STEP = Limit("TRAJECTORY_MAX_STEPS", "values")
TEXT = Limit("EVENT_MAX_TEXT_CHARS", "characters")


@dataclass(frozen=True)
class Excess:
    field: str
    size: int
    limit: Limit

    def __str__(self) -> str:
        return (
            f"{self.field}: {self.size:,} {self.limit.unit}, more than the limit of "
            f"{self.limit.value:,} ({self.limit.setting})"
        )


def excesses(event: Any) -> list[Excess]:
    """The fields of ``event`` past their limit (at most :data:`MAX_NOTES`)."""
    if not isinstance(event, dict):
        return []
    kind = event.get("type")
    if kind == "trajectory":
        found = _trajectory(event)
    else:
        names = _TEXT.get(kind, ()) if isinstance(kind, str) else ()
        found = (e for name in names for e in _text(event.get(name), name))
    return list(islice(found, MAX_NOTES))


def _over(field: str, size: int, limit: Limit) -> Iterator[Excess]:
    if size > limit.value:
        yield Excess(field, size, limit)


def _text(value: Any, field: str) -> Iterator[Excess]:
    if isinstance(value, str):
        yield from _over(field, len(value), TEXT)


def _nested_text(value: Any, field: str, depth: int = 0) -> Iterator[Excess]:
    """Every string inside a JSON value (``facts``, an agent step) over the limit."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, str):
        yield from _text(value, field)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nested_text(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _nested_text(item, f"{field}.{i}", depth + 1)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def segment_tokens(seg: Any) -> int:
    """The tokens a segment holds: its longest per-token array, or the count ``n``
    of a segment recorded as text only."""
    if not isinstance(seg, dict):
        return 0
    n = seg.get("n")
    declared = n if type(n) is int and n > 0 else 0
    lengths = [len(seg[k]) for k in PER_TOKEN if _is_list(seg.get(k))]
    lengths += [len(v) for v in _series(seg).values() if _is_list(v)]
    return max([declared, *lengths])


def _series(seg: dict[str, Any]) -> dict[Any, Any]:
    """A segment's extra per-token arrays (``series``), as sent."""
    series = seg.get("series")
    return series if isinstance(series, dict) else {}


def _at(position: Any) -> int:
    """The token position of a ``special`` entry (an int) or a ``turns`` entry."""
    if _is_list(position) and position:
        position = position[0]
    return position if type(position) is int else 2**31


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _trajectory(ev: dict[str, Any]) -> Iterator[Excess]:
    segments, steps = _list(ev.get("segments")), _list(ev.get("steps"))
    yield from _over("segments", len(segments), SEGMENTS)
    yield from _over("steps", len(steps), STEPS)
    total = 0
    for k, seg in enumerate(segments):
        if not isinstance(seg, dict):
            continue
        for name in (*PER_TOKEN, *POSITIONS):
            if _is_list(seg.get(name)):
                yield from _over(f"segments.{k}.{name}", len(seg[name]), ARRAY)
        for name, values in _series(seg).items():
            if _is_list(values):
                yield from _over(f"segments.{k}.series.{name}", len(values), ARRAY)
        yield from _text(seg.get("text"), f"segments.{k}.text")
        total += segment_tokens(seg)
    yield from _over("segments", total, TOKENS)
    rewards = ev.get("rewards")
    per_step = rewards.get("per_step") if isinstance(rewards, dict) else None
    for name, values in per_step.items() if isinstance(per_step, dict) else ():
        if isinstance(values, list):
            yield from _over(f"rewards.per_step.{name}", len(values), PER_STEP)
    for i, step in enumerate(steps):
        yield from _nested_text(step, f"steps.{i}")
    yield from _nested_text(ev.get("facts"), "facts")


# --- cutting ------------------------------------------------------------------------
def bounded(event: Any) -> Any:
    """``event`` cut to the limits (see the module docstring); a trajectory carries
    the notes of what was cut under :data:`CLIPPED` (empty: nothing was)."""
    if not isinstance(event, dict):
        return event
    found = excesses(event)
    if event.get("type") != "trajectory":
        if not found:
            return event
        cut = {k: _cut_text(event.get(k)) for k in _TEXT.get(event["type"], ())}
        return {**event, **cut, CLIPPED: [str(e) for e in found]}
    out = {**event, CLIPPED: [str(e) for e in found]}
    if found:
        out.update(_cut_trajectory(event))
    return out


def _cut_text(value: Any) -> Any:
    limit = TEXT.value
    if not isinstance(value, str) or len(value) <= limit:
        return value
    marker = f" [cut: {len(value) - limit:,} more characters, {TEXT.setting}]"
    return value[:limit] + marker


def _cut_nested(value: Any, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        return _cut_text(value)
    if isinstance(value, dict):
        return {k: _cut_nested(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_nested(v, depth + 1) for v in value]
    return value


def _cut_trajectory(ev: dict[str, Any]) -> dict[str, Any]:
    """The fields of a trajectory event that change when it is cut to the limits:
    segments past the limit dropped, tokens past the budget dropped from the end
    (every array of a segment cut alike), texts cut, steps and per-step lists cut."""
    left = TOKENS.value
    segments = []
    for seg in _list(ev.get("segments"))[: SEGMENTS.value]:
        if not isinstance(seg, dict):
            segments.append(seg)
            continue
        keep = min(segment_tokens(seg), left)
        left -= keep
        cut = {**seg, "text": _cut_text(seg.get("text"))}
        for name in PER_TOKEN:
            if _is_list(seg.get(name)):
                cut[name] = list(seg[name][:keep])
        if _series(seg):
            cut["series"] = {
                name: list(v[:keep]) if _is_list(v) else v
                for name, v in _series(seg).items()
            }
        for name in POSITIONS:
            if _is_list(seg.get(name)):
                cut[name] = [p for p in seg[name][: ARRAY.value] if _at(p) < keep]
        if type(seg.get("n")) is int:
            cut["n"] = min(seg["n"], keep)
        segments.append(cut)
    steps = _list(ev.get("steps"))[: STEPS.value]
    out: dict[str, Any] = {
        "segments": segments,
        "steps": [_cut_nested(s) for s in steps],
        "facts": _cut_nested(ev.get("facts")),
    }
    rewards = ev.get("rewards")
    if isinstance(rewards, dict) and isinstance(rewards.get("per_step"), dict):
        per_step = {
            k: v[: PER_STEP.value] if isinstance(v, list) else v
            for k, v in rewards["per_step"].items()
        }
        out["rewards"] = {**rewards, "per_step": per_step}
    return out
