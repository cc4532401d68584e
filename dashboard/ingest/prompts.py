"""A group's shared prompt, stored once per (run, step, group).

The rollouts of a group start from the same prompt: written with every rollout it is
most of a real run's bytes (a 1,000-token prompt, 8 rollouts, 500-token completions).
When a batch is written, the longest run of leading segments identical (text, token
strings, packed arrays) across a group's rollouts becomes one :class:`GroupPrompt`
row and each rollout keeps only the segments after it (``shared_prompt`` set). A
rollout arriving in a later batch refers to the stored prompt when its leading
segments are that prompt exactly, and is stored in full otherwise: a stored prompt is
never rewritten, so nothing that refers to it changes.

Readers rebuild a trajectory's segments with :func:`segments_of` (the prompt's, then
its own): the trajectory page, the API's detail and the export see what was sent.
"""

from __future__ import annotations

from typing import Any

from dashboard.ingest import arrays
from dashboard.models import GroupPrompt, Trajectory

Part = tuple[dict[str, Any], bytes]


def common_prefix(lists: list[list[Part]]) -> int:
    """How many leading parts every list has in common (identical meta and bytes)."""
    k = 0
    shortest = min((len(p) for p in lists), default=0)
    while k < shortest and all(p[k] == lists[0][k] for p in lists[1:]):
        k += 1
    return k


def share(
    run_id: Any, rows: dict[tuple, Trajectory], parts: dict[tuple, list[Part]]
) -> list[GroupPrompt]:
    """Set each row's ``segments``/``arrays``/``shared_prompt`` (``rows`` and
    ``parts`` keyed by (step, group, index)); returns the new prompts to insert."""
    by_group: dict[tuple[int, int], list[tuple]] = {}
    for key in rows:
        by_group.setdefault(key[:2], []).append(key)
    stored = _stored(run_id, by_group)
    new = []
    for (step, group), keys in by_group.items():
        prompt = stored.get((step, group))
        if prompt is None and len(keys) >= 2:
            k = common_prefix([parts[key] for key in keys])
            if k and any(m["n"] for m, _ in parts[keys[0]][:k]):
                prompt = parts[keys[0]][:k]
                new.append(
                    GroupPrompt(
                        run_id=run_id,
                        step=step,
                        group=group,
                        segments=[m for m, _ in prompt],
                        arrays=b"".join(b for _, b in prompt),
                    )
                )
        for key in keys:
            own = parts[key]
            k = len(prompt) if prompt and own[: len(prompt)] == prompt else 0
            rows[key].segments = [m for m, _ in own[k:]]
            rows[key].arrays = b"".join(b for _, b in own[k:])
            rows[key].shared_prompt = k > 0
    return new


def _stored(
    run_id: Any, by_group: dict[tuple[int, int], list[tuple]]
) -> dict[tuple[int, int], list[Part]]:
    """The prompts already stored for these (step, group)s, as parts."""
    if not by_group:
        return {}
    steps = {s for s, _ in by_group}
    out = {}
    for gp in GroupPrompt.objects.filter(run_id=run_id, step__in=steps):
        if (gp.step, gp.group) in by_group:
            out[(gp.step, gp.group)] = split(gp.segments, bytes(gp.arrays))
    return out


def split(meta: list[dict[str, Any]], blob: bytes) -> list[Part]:
    """Packed (meta, blob) back into per-segment parts."""
    sizes = [arrays.part_size(m) for m in meta]
    if len(blob) < sum(sizes):
        return [(m, b"") for m in meta]
    out, offset = [], 0
    for m, size in zip(meta, sizes, strict=True):
        out.append((m, blob[offset : offset + size]))
        offset += size
    return out


def prompt_of(t: Trajectory, cache: dict | None = None) -> GroupPrompt | None:
    if not t.shared_prompt:
        return None
    key = (t.run_id, t.step, t.group)
    if cache is not None and key in cache:
        return cache[key]
    gp = GroupPrompt.objects.filter(run_id=t.run_id, step=t.step, group=t.group).first()
    if cache is not None:
        cache.clear()  # readers go group by group: one prompt held at a time
        cache[key] = gp
    return gp


def segments_of(t: Trajectory, cache: dict | None = None) -> list[dict[str, Any]]:
    """The trajectory's segments as sent, unpacked (the shared prompt's first)."""
    gp = prompt_of(t, cache)
    head = arrays.unpack_segments(gp.segments, gp.arrays) if gp else []
    return head + arrays.unpack_segments(t.segments, t.arrays)


def meta_of(t: Trajectory, cache: dict | None = None) -> list[dict[str, Any]]:
    """The trajectory's segment metadata (no arrays), the shared prompt's first."""
    gp = prompt_of(t, cache)
    own = t.segments if isinstance(t.segments, list) else []
    return (list(gp.segments) if gp else []) + own
