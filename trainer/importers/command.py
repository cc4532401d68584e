"""``python -m trainer import``: send a saved or foreign run to a dashboard.

    python -m trainer import events.jsonl|SPOOL_DIR|EXPORT --report-to URL [--name N]
                             [--run-id ID]
    python -m trainer import --from verl ROLLOUT_DIR --report-to URL [--name N]
                             [--metrics FILE] [--follow] [--poll-s S] [--idle-exit S]
    python -m trainer import --from wandb RUN_DIR|WANDB_DIR --report-to URL
                             [--name N] [--state FILE] [--follow] [--poll-s S]
                             [--idle-exit S]
    python -m trainer import --from trl|tensorboard|prime-rl|miles|tinker DIR
                             --report-to URL [--name N] [--follow]
                             [--tokenizer NAME_OR_DIR] ...

``DIR`` is TRL's ``output_dir`` (completions parquet and TensorBoard scalars), any
directory of TensorBoard event files, prime-rl's run directory, miles's
``--dump-details`` directory or Tinker cookbook's ``log_path`` (each layout is
described in its reader's module). The token comes from ``DASHBOARD_TOKEN`` (exit 2
without it). ``--follow`` keeps reading a live run's files (new metric lines, new
step files) until Ctrl-C or until nothing new arrived for ``--idle-exit`` seconds; an
import that ends by itself (not by Ctrl-C) marks the run finished
(``run_finished``, ``succeeded``). ``--tokenizer`` (a local tokenizer directory or a
cached model name) gives the token ids of prime-rl's and miles's trajectories their
text on the trajectory page (:mod:`trainer.importers.pieces`). W&B run directories are
:mod:`trainer.importers.wandb_import`'s (each run once; finished by W&B's own exit
record); reading them needs ``pip install -r requirements-wandb.txt``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from trainer.httpsink import HttpSink

SOURCES = (
    "events",
    "verl",
    "wandb",
    "trl",
    "tensorboard",
    "prime-rl",
    "miles",
    "tinker",
)


def make_reader(source: str, path: Path) -> Any:
    """The reader of ``source``'s layout at ``path`` (a directory)."""
    from trainer.importers import miles, primerl, tinker, trl_output
    from trainer.importers.tensorboard import TensorBoardReader

    if not path.is_dir():
        raise ValueError(f"{path}: --from {source} reads a directory")
    readers = {
        "trl": trl_output.TrlReader,
        "tensorboard": TensorBoardReader,
        "prime-rl": primerl.PrimeRlReader,
        "miles": miles.MilesReader,
        "tinker": tinker.TinkerReader,
    }
    return readers[source](path)


def add_import_parser(sub: Any) -> None:
    imp = sub.add_parser("import", help="send a saved or foreign run to a dashboard")
    imp.add_argument(
        "path", help="events.jsonl, a spool directory, a run's dir, or W&B run dir(s)"
    )
    imp.add_argument("--report-to", required=True, metavar="URL")
    imp.add_argument("--from", dest="source", choices=SOURCES, default="events")
    imp.add_argument("--name", default=None, help="the dashboard run's name")
    imp.add_argument("--run-id", default=None, help="send into this existing run")
    imp.add_argument("--metrics", default=None, help="verl file-logger .jsonl")
    imp.add_argument("--follow", action="store_true", help="tail a live run")
    imp.add_argument(
        "--state", default=None, help="W&B: the file of runs imported before"
    )
    imp.add_argument("--poll-s", type=float, default=2.0)
    imp.add_argument("--idle-exit", type=float, default=None, metavar="SECONDS")
    imp.add_argument(
        "--spool", default=None, help="spool directory (default: a temp dir)"
    )
    imp.add_argument("--close-timeout", type=float, default=120.0)
    imp.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME_OR_DIR",
        help="read token ids as text (local files only: never downloaded)",
    )


def run_import(args: argparse.Namespace) -> int:
    from trainer.importers.jsonl import BadEventsFile
    from trainer.reporting import MissingToken, token_from_env

    try:
        token = token_from_env()
    except MissingToken as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = Path(args.path)
    if args.source == "wandb":
        return _import_wandb(args, path, token)
    try:
        if args.source == "verl":
            sink, finished = _import_verl(args, path, token)
        elif args.source != "events":
            reader = make_reader(args.source, path)
            if args.tokenizer:
                from trainer.importers.pieces import WithPieces, load_tokenizer

                reader = WithPieces(reader, load_tokenizer(args.tokenizer))
            config = _config(args.source, reader)
            sink, finished = _import_reader(args, reader, config, token)
        else:
            sink, finished = _import_events(args, path, token), True
    except (BadEventsFile, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sink.close(timeout=args.close_timeout)
    stats = sink.stats
    print(
        f"run {sink.run_id}: {stats['accepted']} events accepted, "
        f"{stats['duplicates']} duplicates, {stats['rejected']} rejected"
        + ("" if finished else " (stopped by Ctrl-C; the run is left open)")
    )
    if sink.error is not None:
        print(f"error: {sink.error}; events kept in {sink.spool_dir}", file=sys.stderr)
        return 1
    return 0


def _import_wandb(args: argparse.Namespace, path: Path, token: str) -> int:
    from trainer.importers.wandb_dir import WandbMissing
    from trainer.importers.wandb_import import import_wandb
    from trainer.importers.wandb_log import BadWandbFile

    try:
        return import_wandb(args, path, token)
    except (WandbMissing, BadWandbFile, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _sink(args: argparse.Namespace, token: str, **kwargs: Any) -> HttpSink:
    return HttpSink(args.report_to, token, args.run_id, spool_dir=args.spool, **kwargs)


def _import_events(args: argparse.Namespace, path: Path, token: str) -> HttpSink:
    from trainer.importers.jsonl import first_config, header, replay

    config = first_config(path)
    head = header(path) or {}
    name = args.name or head.get("name") or config.get("name") or path.stem
    framework = head.get("framework") or "import"
    sink = _sink(args, token, name=str(name), framework=str(framework), config=config)
    try:
        for event in replay(path):
            sink.emit(event)
    except Exception:
        sink.close(timeout=args.close_timeout)
        raise
    return sink


def _import_verl(
    args: argparse.Namespace, path: Path, token: str
) -> tuple[HttpSink, bool]:
    from trainer.importers.verl import VerlReader

    if not path.is_dir():
        raise ValueError(f"{path}: verl's rollout_data_dir must be a directory")
    reader = VerlReader(path, args.metrics)
    config = {
        "source": "verl",
        "rollout_data_dir": str(path.resolve()),
        "metrics_file": str(reader.metrics_file) if reader.metrics_file else None,
    }
    return _import_reader(args, reader, config, token, framework="verl")


def _config(source: str, reader: Any) -> dict[str, Any]:
    if hasattr(reader, "config"):
        return reader.config()
    return {"source": source, "dir": str(Path(reader.directory).resolve())}


def _import_reader(
    args: argparse.Namespace,
    reader: Any,
    config: dict[str, Any],
    token: str,
    *,
    framework: str | None = None,
) -> tuple[HttpSink, bool]:
    """Sends everything ``reader`` yields (``poll``, ``flush``, ``last_step``),
    following a live run with ``--follow``."""
    framework = framework or args.source
    name = args.name or Path(args.path).resolve().name
    sink = _sink(args, token, name=name, framework=framework, config=config)
    sink.emit(
        {
            "type": "run_started",
            "config": config,
            "start_step": 0,
            "num_params": 0,
            "device": "unknown",
        }
    )
    try:
        finished = follow(reader, sink, args) if args.follow else True
        for event in reader.poll() + reader.flush():  # all of it, or a last sweep
            sink.emit(event)
    except Exception:
        sink.close(timeout=args.close_timeout)  # what was read stays spooled
        raise
    if finished:
        sink.emit(
            {
                "type": "run_finished",
                "status": "succeeded",
                "step": reader.last_step,
                "error": None,
            }
        )
    return sink, finished


def follow(reader: Any, sink: HttpSink, args: argparse.Namespace) -> bool:
    """Polls until Ctrl-C (returns False) or ``--idle-exit`` seconds without anything
    new (True)."""
    last_new = time.monotonic()
    try:
        while True:
            events = reader.poll(settle=True)
            for event in events:
                sink.emit(event)
            now = time.monotonic()
            if events:
                last_new = now
            elif args.idle_exit is not None and now - last_new >= args.idle_exit:
                return True
            time.sleep(args.poll_s)
    except KeyboardInterrupt:
        return False
