"""Recorded slices of the suite's runs: the small fixtures the tests replay.

``python bench/hacking_suite.py --slices tests/fixtures/hacking`` cuts, from the
recording of each hack that was caught as the goal asks, the steps from the run's
first (whose start levels some detectors compare with) to ``AFTER`` after its onset
(or after the alert), and the same steps of its healthy twin. A slice keeps every step's summary (what
the monitor reads) and the metrics the server reads (what a trainer sends), and the
rollouts (the numbers the evidence and the labels read) of the steps around the
onset only, where the first alert must name them: small enough to keep in the
repository, whole enough that a detector replayed over it fires where it did over
the whole run. Its meta keeps the run's baseline and the onset measured on the whole
run. The healthy runs of :data:`HEALTHY_KEPT` are kept whole, without their
rollouts, under ``healthy/``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.hacking_cases import cases
from bench.hacking_measure import (
    GOAL_DELAY,
    baseline,
    measure_hack,
    row_numbers,
    step_summary,
    with_episode_means,
)
from bench.hacking_record import read_recording

AFTER = 12  # steps after it: past the goal's 10
# Healthy runs kept whole (their summaries and metrics, no rollouts): those whose
# learning once raised false alarms (the swarm demos lengthen their episodes and
# sharpen their entropy as their success climbs), replayed by the tests.
HEALTHY_KEPT = ("swarm", "swarm_live")
ROWS_BEFORE = 5  # rollouts kept from this many steps before the onset ...
# ... to GOAL_DELAY steps after it
KEEP = (
    "parallelism", "finish_rate", "subagent_yield", "single_search_exit", "prunes",
    "single_doc_prunes", "success", "judge/score", "length", "truncated", "entropy",
    "reward", "group_zero_std", "repetition", "format_ok", "proxy_reward", "serial",
    "one_at_a_time",
)  # fmt: skip


def _server_metrics(
    metrics: Mapping[str, Any], summary: Mapping[str, float]
) -> dict[str, Any]:
    """The step's metrics the server reads, with the ``<key>/mean`` our trainer logs
    for each per-episode value: taken from the rollouts' means (``summary``) where
    the recording predates the value (``one_at_a_time``)."""
    from rewards.detectors import _FROM_METRICS, _FROM_RESULTS

    wanted = {*_FROM_METRICS, *(f"{k}/mean" for k in _FROM_RESULTS)}
    out = {
        k: v
        for k, v in metrics.items()
        if k in wanted or (k.startswith("rewards/") and k.endswith("/mean"))
    }
    return with_episode_means(out, summary)


def cut(
    meta: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    first: int,
    last: int,
    rows_from: int | None,
    rows_to: int | None,
    extra: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The lines of a slice file: its meta, then its steps."""
    out: list[dict[str, Any]] = [{"meta": {**meta, **extra, "slice": [first, last]}}]
    for line in steps:
        s = line["step"]
        if not first <= s <= last:
            continue
        keep_rows = rows_from is not None and rows_from <= s <= rows_to
        summary = step_summary(line)
        out.append(
            {
                "step": s,
                "summary": summary,
                "metrics": _server_metrics(line["metrics"], summary),
                "rows": [
                    {**r, "n": {k: v for k, v in row_numbers(r).items() if k in KEEP}}
                    for r in line["rows"]
                ]
                if keep_rows
                else [],
            }
        )
    return out


def write(path: Path, lines: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


def write_slices(directory: Path, target: Path) -> list[str]:
    """A slice of every hack caught as the goal asks (within ``GOAL_DELAY`` steps
    of its onset, naming hacked rollouts), and of its twin; returns their names."""
    written = []
    for case in cases():
        path = directory / f"hack-{case.name}.jsonl.gz"
        twin_path = directory / f"{case.twin}.jsonl.gz"
        if not path.exists() or not twin_path.exists():
            continue
        meta, steps, _ = read_recording(path)
        result = measure_hack(case, meta, steps)
        if not result.met:  # what a slice's test asserts is that it was met
            continue
        alert = result.first_alert
        # From the run's first step: detectors compare with the run's start levels
        # (``start/<key>``), which the replay (and the server) read from there.
        first = 1
        last = max(result.onset, alert) + AFTER
        extra = {"baseline": baseline(steps), "onset": result.onset, "case": case.name}
        rows = (
            min(result.onset - ROWS_BEFORE, alert),
            max(result.onset + GOAL_DELAY, alert),
        )
        write(
            target / f"{case.name}.jsonl.gz",
            cut(meta, steps, first, last, *rows, extra),
        )
        twin_meta, twin_steps, _ = read_recording(twin_path)
        write(
            target / f"{case.name}-twin.jsonl.gz",
            cut(twin_meta, twin_steps, first, last, None, None, {"case": case.name}),
        )
        written.append(case.name)
    for name in HEALTHY_KEPT:
        path = directory / f"{name}.jsonl.gz"
        if path.exists():
            meta, steps, _ = read_recording(path)
            lines = cut(meta, steps, 1, len(steps), None, None, {"case": None})
            write(target / "healthy" / f"{name}.jsonl.gz", lines)
            written.append(f"healthy/{name}")
    return written


def read_slice(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return lines[0]["meta"], lines[1:]
