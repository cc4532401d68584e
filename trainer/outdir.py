"""A CLI run's ``--out`` directory: resume it, refuse it, or start it afresh.

A second ``python -m trainer run`` with the same ``--out`` continues the first only
from a checkpoint (the resume path: ``checkpoints/``, and the dashboard run named in
``dashboard_run.json``). Without one, training again from step 1 there would splice a
new run into the old one's ``events.jsonl`` and dashboard run (overwriting its steps),
so it is refused; ``--overwrite`` clears the old run's files first and reports as a
new dashboard run. An unsent spool is kept aside, never replayed into the new run.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from trainer.checkpoint import latest_checkpoint

# What a run leaves in --out (trainer.cli, trainer.reporting).
EVENTS, RUN_FILE, CHECKPOINTS, SPOOL = (
    "events.jsonl",
    "dashboard_run.json",
    "checkpoints",
    "spool",
)


def earlier_run(out: Path) -> list[str]:
    """The files of an earlier run in ``out`` (empty: a fresh directory)."""
    found = []
    for name in (EVENTS, RUN_FILE, CHECKPOINTS, SPOOL):
        path = out / name
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            found.append(name)
    return found


def refusal(out: Path, *, resume: bool) -> str | None:
    """Why ``out`` cannot take this run, or None: it is fresh, or ``resume`` and it
    holds a checkpoint to continue from."""
    found = earlier_run(out)
    if not found:
        return None
    ckpt = latest_checkpoint(out / CHECKPOINTS)
    if resume and ckpt is not None:
        return None
    why = (
        f"its checkpoint {ckpt.name} is ignored (--no-resume)"
        if ckpt is not None
        else "it holds no checkpoint to resume from"
    )
    return (
        f"--out {out} holds an earlier run ({', '.join(found)}) and {why}; training "
        "again from step 1 would overwrite that run's steps. Pass --overwrite to "
        "delete it and start afresh (reported as a new dashboard run), or choose "
        "another --out"
    )


def clear(out: Path) -> list[str]:
    """Delete the earlier run's files in ``out``; a spool with unsent events is
    moved to ``out/unsent-<time>/`` instead. Lines for the user."""
    lines = []
    spool = out / SPOOL
    if spool.is_dir() and any(spool.glob("spool-*")):
        aside = out / f"unsent-{time.strftime('%Y%m%d-%H%M%S')}"
        spool.rename(aside)
        lines.append(f"the earlier run's unsent events were moved to {aside}")
    for name in earlier_run(out):
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        lines.append(f"deleted {path}")
    return lines
