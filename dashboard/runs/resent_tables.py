"""TRL's completions table sent again at a step that already holds it.

TRL's ``GRPOTrainer.log`` logs the completions of the steps since its last log on
every call, and the call at the end of training (``train_runtime``...) comes at the
same global step as the last step's own: trackio's client sends the table again
with a new ``log_id``, so the entry receipts do not catch it, and the step held
every rollout twice (a group of 2 became a group of 4 with two copies). A table is a
re-send when every row of it is a rollout already stored at its step (or sent
earlier in the same call): the same task, completion, reward and advantage; then it
is dropped whole. A table with any new row is kept whole (rows alike within one
table are two samples that came out the same, not a re-send).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from dashboard.models import Run, Trajectory

Print = tuple[str, Any, Any, str]


def _num(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def _completion(segments: Any) -> str:
    """The text of the last action segment (the completion)."""
    for seg in reversed(segments if isinstance(segments, list) else []):
        if isinstance(seg, dict) and seg.get("kind") == "action":
            return str(seg.get("text") or "")
    return ""


def fingerprint(task_id: Any, reward: Any, advantage: Any, segments: Any) -> Print:
    return (str(task_id or ""), _num(reward), _num(advantage), _completion(segments))


def _stored(run: Run, steps: Iterable[int]) -> dict[int, Counter]:
    held: dict[int, Counter] = {}
    rows = Trajectory.objects.filter(run=run, step__in=set(steps)).values_list(
        "step", "task_id", "reward", "advantage", "segments"
    )
    for step, task, reward, advantage, segments in rows.iterator(chunk_size=500):
        held.setdefault(step, Counter())[
            fingerprint(task, reward, advantage, segments)
        ] += 1
    return held


def drop_resent(
    run: Run, per_entry: list[tuple[str, list[dict[str, Any]]]]
) -> tuple[list[tuple[str, list[dict[str, Any]]]], int]:
    """``per_entry`` (each entry's events) without the completions tables that are
    re-sends, and how many rows were dropped. An entry's unplaced trajectories at a
    step are its tables' rows there."""
    steps = {
        ev["step"]
        for _, evs in per_entry
        for ev in evs
        if ev["type"] == "trajectory" and ev.get("group") is None
    }
    if not steps:
        return per_entry, 0
    held = _stored(run, steps)
    out, dropped = [], 0
    for where, evs in per_entry:
        tables: dict[int, list[dict[str, Any]]] = {}
        for ev in evs:
            if ev["type"] == "trajectory" and ev.get("group") is None:
                tables.setdefault(ev["step"], []).append(ev)
        resent: set[int] = set()
        for step, rows in tables.items():
            prints = Counter(
                fingerprint(
                    ev.get("task_id"), ev.get("reward"), ev.get("advantage"),
                    ev.get("segments"),
                )
                for ev in rows
            )  # fmt: skip
            have = held.setdefault(step, Counter())
            if all(have[p] >= n for p, n in prints.items()):
                resent.add(step)
                dropped += len(rows)
            else:
                have.update(prints)
        out.append(
            (
                where,
                [
                    ev
                    for ev in evs
                    if not (
                        ev["type"] == "trajectory"
                        and ev.get("group") is None
                        and ev["step"] in resent
                    )
                ],
            )
        )
    return out, dropped
