"""The recording policy (``trainer.recording_policy``) applied to a batch of events on the
server, for external runs (streamed from TRL or verl, imported): our trainer applies
it itself before it builds its records. Pure: events in, events out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dashboard import jsonsafe
from dashboard.jsonsafe import as_int
from trainer.recording_policy import RecordConfig, alert_event_groups, select


def recorded(
    events: Iterable[dict[str, Any]],
    record: RecordConfig,
    seed: int = 0,
    alerted: Mapping[int, Iterable[int]] | None = None,
) -> list[dict[str, Any]]:
    """``events`` less what the recording policy leaves out (``trainer.recording_policy``):
    per step, the trajectories, judgements and critical paths of unchosen groups;
    without token arrays, each segment's arrays. Metrics and alerts all stay. The
    groups alerts of the batch point at are kept, and so are ``alerted[step]`` (those
    of alerts stored before the batch)."""
    events = list(events)
    rewards: dict[int, dict[int, list[float | None]]] = {}
    alerts: dict[int, list[Any]] = {}
    for ev in events:
        kind, step = ev.get("type"), as_int(ev.get("step"))
        if kind == "trajectory":
            group = rewards.setdefault(step, {}).setdefault(as_int(ev.get("group")), [])
            group.append(_reward(ev.get("reward")))
        elif kind == "alert":
            alerts.setdefault(step, []).append(ev)
    chosen = {}
    for step, groups in rewards.items():
        pointed = alert_event_groups(alerts.get(step, ()))
        pointed.update((alerted or {}).get(step, ()))
        chosen[step] = select(record, step, groups, pointed, seed)
    out = []
    for ev in events:
        kind = ev.get("type")
        if kind in ("trajectory", "judgement", "critical_path"):
            pick = chosen.get(as_int(ev.get("step")))
            if pick is not None and as_int(ev.get("group")) not in pick.groups:
                continue
            if kind == "trajectory" and not record.token_arrays:
                ev = {**ev, "segments": _without_arrays(ev.get("segments"))}
        out.append(ev)
    return out


def _without_arrays(segments: Any) -> list[dict[str, Any]]:
    out = []
    for seg in segments if isinstance(segments, list) else []:
        if isinstance(seg, dict):
            ids, tokens = seg.get("token_ids"), seg.get("tokens")
            n = max(
                len(ids) if isinstance(ids, list) else 0,
                len(tokens) if isinstance(tokens, list) else 0,
            )
            keep = ("turn", "kind", "role", "text", "mask", "branch")
            out.append({**{k: seg.get(k) for k in keep}, "n": n})
    return out


def _reward(value: Any) -> float | None:
    return None if value is None else jsonsafe.to_float(value)
