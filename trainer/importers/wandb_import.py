"""``python -m trainer import --from wandb DIR``: each W&B run of DIR, once.

``DIR`` is one run directory or a ``wandb/`` folder of them; each W&B run becomes
its own dashboard run (framework ``wandb``). Which were imported is kept in a small
state file, by dashboard URL and W&B run id: ``<run dir>/.dashboard-import.json``, or
the one file ``--state PATH``. A run imported to its end is skipped the next time; a
run left open (still being written, or an import stopped by Ctrl-C) is continued
into the same dashboard run, its events re-read from the start (the dashboard stores
each once: the first write wins).

Without ``--follow`` each run is read as far as it is written. With it, the runs are
polled every ``--poll-s`` seconds (a ``wandb/`` folder is also watched for new runs)
until Ctrl-C, until nothing new arrived for ``--idle-exit`` seconds, or, for a single
run directory, until that run ends. A run whose log holds W&B's exit record is
finished (``succeeded``, or ``failed`` for a non-zero exit code); any other is left
open. Pure: no Django.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.httpsink import HttpSink
from trainer.importers.wandb_dir import WandbReader, find_runs, log_file

log = logging.getLogger("trainer.importers.wandb")
STATE_NAME = ".dashboard-import.json"


class ImportState:
    """``{url: {W&B run id: {"run": dashboard run id, "done": bool}}}`` in one JSON
    file, rewritten whole (through a temporary file) on every change."""

    _lock = threading.Lock()  # the sink's thread reports the run id it created

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.url = url.rstrip("/")

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise ValueError(f"{self.path}: not a JSON import state ({exc})") from None
        return data if isinstance(data, dict) else {}

    def get(self, wandb_id: str) -> dict[str, Any]:
        with self._lock:
            entry = self._load().get(self.url, {}).get(wandb_id)
        return entry if isinstance(entry, dict) else {}

    def update(self, wandb_id: str, **fields: Any) -> None:
        with self._lock:
            data = self._load()
            runs = data.setdefault(self.url, {})
            runs[wandb_id] = {**(runs.get(wandb_id) or {}), **fields}
            try:
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".import-")
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(data, fh, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except OSError as exc:
                log.warning(
                    "cannot write %s (%s): a re-run sends this run again (the "
                    "dashboard keeps each event once)",
                    self.path,
                    exc,
                )


@dataclass
class RunImport:
    reader: WandbReader
    sink: HttpSink
    state: ImportState


def import_wandb(args: argparse.Namespace, path: Path, token: str) -> int:
    """Imports every run of ``path``; the exit code (1 when a dashboard refused
    one, with its events kept in the spool the message names)."""
    if not path.is_dir():
        raise ValueError(f"{path}: not a directory (a W&B run or a wandb/ folder)")
    single = log_file(path) is not None
    if not single and not find_runs(path) and not args.follow:
        raise ValueError(f"{path}: no W&B run directories (run-*/run-*.wandb) here")
    if args.run_id and not single:
        raise ValueError("--run-id: only with a single run directory")
    seen: set[Path] = set()
    active: list[RunImport] = []
    code = 0
    stopped = False
    last_new = time.monotonic()
    try:
        while True:
            for run_dir in find_runs(path):
                if run_dir not in seen:
                    seen.add(run_dir)
                    started = _start(args, token, run_dir, single)
                    if started is not None:
                        active.append(started)
                        last_new = time.monotonic()
            for imp in list(active):
                if _pump(imp):
                    last_new = time.monotonic()
                if imp.reader.finished:
                    active.remove(imp)
                    code = max(code, _close(args, imp))
            if not args.follow or (single and not active):
                break
            idle = time.monotonic() - last_new
            if args.idle_exit is not None and idle >= args.idle_exit:
                break
            time.sleep(args.poll_s)
    except KeyboardInterrupt:
        stopped = True
    for imp in active:
        code = max(code, _close(args, imp, stopped=stopped))
    return code


def _state_for(args: argparse.Namespace, run_dir: Path) -> ImportState:
    path = Path(args.state) if args.state else run_dir / STATE_NAME
    return ImportState(path, args.report_to)


def _start(
    args: argparse.Namespace, token: str, run_dir: Path, single: bool
) -> RunImport | None:
    """Opens the run and its dashboard run, and sends what is written so far; None
    for a run imported to its end before."""
    reader = WandbReader(run_dir)
    state = _state_for(args, run_dir)
    before = state.get(reader.run_id)
    if before.get("done"):
        print(
            f"W&B run {reader.run_id}: imported before as run {before.get('run')}; "
            "skipped"
        )
        return None
    events = reader.poll()  # the run record and config come first in the log
    wandb_id = reader.run_id

    def remember(run_id: str) -> None:
        state.update(wandb_id, run=run_id, done=False)

    spool = Path(args.spool) / wandb_id if args.spool else None
    sink = HttpSink(
        args.report_to,
        token,
        (args.run_id if single else None) or before.get("run"),
        name=(args.name if single else None) or reader.info.get("name") or wandb_id,
        framework="wandb",
        config=reader.run_config(),
        spool_dir=spool,
        on_run_id=remember,
    )
    sink.emit(
        {
            "type": "run_started",
            "config": reader.run_config(),
            "start_step": 0,
            "num_params": 0,
            "device": "unknown",
        }
    )
    for event in events:
        sink.emit(event)
    return RunImport(reader, sink, state)


def _pump(imp: RunImport) -> bool:
    """Sends what the run's log gained since; whether there was anything."""
    events = imp.reader.poll()
    for event in events:
        imp.sink.emit(event)
    return bool(events)


def _close(args: argparse.Namespace, imp: RunImport, *, stopped: bool = False) -> int:
    reader, sink = imp.reader, imp.sink
    for event in reader.flush():
        sink.emit(event)
    if reader.finished:
        failed = reader.exit_code != 0
        sink.emit(
            {
                "type": "run_finished",
                "status": "failed" if failed else "succeeded",
                "step": reader.last_step,
                "error": f"W&B exit code {reader.exit_code}" if failed else None,
            }
        )
    sink.close(timeout=args.close_timeout)
    stats = sink.stats
    why = "stopped by Ctrl-C; " if stopped else ""
    print(
        f"W&B run {reader.run_id} -> run {sink.run_id}: {stats['accepted']} events "
        f"accepted, {stats['duplicates']} duplicates, {stats['rejected']} rejected"
        + ("" if reader.finished else f" ({why}the W&B run has not ended: left open)")
    )
    for path in reader.missing_tables:
        print(
            f"warning: W&B run {reader.run_id}: table {path} not found", file=sys.stderr
        )
    if sink.error is not None:
        print(f"error: {sink.error}; events kept in {sink.spool_dir}", file=sys.stderr)
        return 1
    if sink.run_id is not None:
        imp.state.update(reader.run_id, run=sink.run_id, done=reader.finished)
    return 0
