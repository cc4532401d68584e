"""``python -m trainer``: run a config file, or list the algorithm presets.

    python -m trainer run CONFIG.yaml|json [--steps N] [--out DIR] [--no-resume]
                                           [--overwrite]
                                           [--report-to URL] [--plugin MODULE ...]
                                           [--nproc-per-node N]
    python -m trainer import events.jsonl|SPOOL_DIR --report-to URL [--name N]
    python -m trainer import --from verl DIR --report-to URL [--follow]
    python -m trainer import --from wandb DIR --report-to URL [--follow]
    python -m trainer presets
    python -m trainer export-model CHECKPOINT_OR_RUN_DIR OUT_DIR [--adapter]

A bad config prints every bad field with the reason and exits with status 2. ``--out``
receives ``events.jsonl`` and ``checkpoints/``; a second run with the same ``--out``
resumes from the newest checkpoint, and without one is refused (``--overwrite``
starts afresh: :mod:`trainer.outdir`). ``--report-to URL`` also streams the run to a
dashboard (:mod:`trainer.reporting`); ``import`` is :mod:`trainer.importers.command`.
``run`` loads the ``--plugin`` modules and the ``agentic_rl.plugins`` entry points
first (:mod:`trainer.plugins`), so a config may name what they register.

A run of N > 1 processes (``resources.processes``, or ``--nproc-per-node N`` which
overrides it) is relaunched through ``torch.distributed.run`` (torchrun) with this same
command; each process then trains as one rank (:mod:`trainer.distributed`) and rank 0
alone writes ``events.jsonl``, prints and reports.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainer.config import TrainConfig, format_errors


def load_config_file(path: str, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Parse YAML or JSON and validate; raises ValidationError or ValueError."""
    text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError("the config file must hold a mapping at the top level")
    for key, value in (overrides or {}).items():
        # A section's override replaces only the fields it names.
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return TrainConfig.model_validate(data)


def _cmd_presets() -> int:
    from trainer.algorithms import PRESET_LABELS, PRESETS, describe_preset

    for name in PRESETS:
        fields = describe_preset(name)
        print(f"{name:8s} {PRESET_LABELS.get(name, '')}")
        for key, value in fields.items():
            print(f"    {key:20s} {value}")
    print(_ORTHOGONAL)
    return 0


# Options every preset takes, set by no preset (off unless the config sets them).
_ORTHOGONAL = """\
every preset also takes (off by default):
    rollout_correction   {kind: token|sequence, mode: truncate|mask, cap, lower}: \
importance weights against the sampler (TRL's vllm_importance_sampling_mode)
    kl_kind              k1|k2|k3|abs (with kl_beta > 0)
    delta                two-sided clip, > 1 (ppo_clip, gspo)
    top_entropy_quantile train on the top share of tokens by entropy"""


def _cmd_run(args: argparse.Namespace) -> int:
    from trainer.plugins import PluginError, load_plugins

    try:
        load_plugins(args.plugin)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {}
    if args.steps is not None:
        overrides["steps"] = args.steps
    if args.nproc_per_node is not None:
        overrides["resources"] = {"processes": args.nproc_per_node}
    try:
        cfg = load_config_file(args.config, overrides)
    except FileNotFoundError:
        print(f"error: config file {args.config!r} not found", file=sys.stderr)
        return 2
    except (ValidationError, ValueError, yaml.YAMLError, json.JSONDecodeError) as exc:
        print(f"error: invalid config {args.config}:", file=sys.stderr)
        for line in format_errors(exc):
            print(f"  {line}", file=sys.stderr)
        return 2
    if (code := _check_out(args)) is not None:
        return code
    from trainer.single import Single

    parallel: Any = Single()  # one process: a world of size one
    if cfg.resources.processes > 1:
        import torch.distributed as dist

        if not dist.is_torchelastic_launched():
            return _launch(args, cfg.resources.processes)
        from trainer.distributed import start

        parallel = start(cfg.model.device, cfg.resources.strategy)
        if parallel.world != cfg.resources.processes:
            print(
                f"error: resources.processes is {cfg.resources.processes}, torchrun "
                f"started {parallel.world} processes",
                file=sys.stderr,
            )
            parallel.close()
            return 2
    try:
        return _train(args, cfg, parallel)
    finally:
        parallel.close()


def _check_out(args: argparse.Namespace) -> int | None:
    """Exit status 2 when ``--out`` holds an earlier run this one must not continue
    (:mod:`trainer.outdir`); with ``--overwrite`` that run is cleared first. Under
    torchrun only rank 0 looks (the others wait for it in the rendezvous)."""
    import os

    from trainer.outdir import clear, refusal

    if not args.out or os.environ.get("RANK", "0") != "0":
        return None
    out = Path(args.out)
    if args.overwrite:
        for line in clear(out):
            print(line, file=sys.stderr)
        return None
    if (why := refusal(out, resume=not args.no_resume)) is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    return None


def _launch(args: argparse.Namespace, processes: int) -> int:
    """This command again, as ``processes`` ranks under ``torch.distributed.run``
    (one machine: ``--standalone`` picks a free rendezvous port)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    again = ["run", args.config, "--nproc-per-node", str(processes)]
    if args.steps is not None:
        again += ["--steps", str(args.steps)]
    if args.out:
        again += ["--out", args.out]
    if args.no_resume:
        again.append("--no-resume")
    if args.report_to:
        again += ["--report-to", args.report_to]
    for plugin in args.plugin:
        again += ["--plugin", plugin]
    launch = get_args_parser().parse_args(
        ["--standalone", "--nproc-per-node", str(processes), "--module", "trainer"]
        + again
    )
    try:
        run(launch)
    except ChildFailedError as exc:
        print(f"error: a training process failed: {exc}", file=sys.stderr)
        return 1
    return 0


def _train(args: argparse.Namespace, cfg: TrainConfig, parallel: Any) -> int:
    from trainer.events import JsonlSink, NullSink
    from trainer.runner import run_from_config

    out = Path(args.out) if args.out else None
    if not parallel.main:  # rank 0 alone writes, prints and reports the run
        try:
            result = run_from_config(
                cfg,
                NullSink(),
                checkpoint_dir=(out / "checkpoints") if out else None,
                resume=not args.no_resume,
                parallel=parallel,
            )
        except Exception as exc:
            print(
                f"error: rank {parallel.rank} failed: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return 1
        return 0 if result.status == "succeeded" else 1
    sink = JsonlSink(out / "events.jsonl") if out else NullSink()
    reporter = None
    if args.report_to:
        from trainer.events import TeeSink
        from trainer.reporting import MissingToken, run_reporter, token_from_env

        try:
            token = token_from_env()
        except MissingToken as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        reporter = run_reporter(
            args.report_to,
            token,
            out=out,
            name=cfg.name,
            config=cfg.model_dump(mode="json"),
        )
        sink = TeeSink(sink, reporter)
    printer = _Printer(sink)
    try:
        result = run_from_config(
            cfg,
            printer,
            checkpoint_dir=(out / "checkpoints") if out else None,
            resume=not args.no_resume,
            parallel=parallel,
        )
    except Exception as exc:
        print(f"error: training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        sink.close()
        if reporter is not None:
            from trainer.reporting import report_outcome

            if (line := report_outcome(reporter)) is not None:
                print(line, file=sys.stderr)
    print(f"{result.status} after step {result.last_step}")
    return 0 if result.status == "succeeded" else 1


class _Printer:
    """Forwards events and prints one line per step (and per warm-start report)."""

    KEYS = (
        "reward",
        "reward_std",
        "kl",
        "entropy",
        "grad_norm",
        "completions/mean_length",
    )

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def emit(self, event: dict[str, Any]) -> None:
        self.inner.emit(event)
        if event["type"] == "step" and event["step"] > 0:
            m = event["metrics"]
            parts = [
                f"{k}={m[k]:.4g}" for k in self.KEYS if k in m and not math.isnan(m[k])
            ]
            print(f"step {event['step']:5d}  " + "  ".join(parts), flush=True)
        elif event["type"] == "alert":
            print(f"  ALERT [{event['detector']}] {event['message']}", flush=True)
        elif event["type"] == "warmstart":
            print(
                f"warm start: {event['done']} of {event['of']} steps  "
                f"loss={event['loss']:.4g}",
                flush=True,
            )

    def close(self) -> None:
        self.inner.close()


def _cmd_export(args: argparse.Namespace) -> int:
    from trainer.export import ExportError, export

    try:
        out = export(args.source, args.out, "adapter" if args.adapter else "model")
    except (ExportError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"exported {args.source} to {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="train from a YAML or JSON config")
    run.add_argument("config")
    run.add_argument("--steps", type=int, default=None, help="override config.steps")
    run.add_argument(
        "--out", default=None, help="directory for events.jsonl and checkpoints"
    )
    run.add_argument(
        "--no-resume", action="store_true", help="ignore existing checkpoints"
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier run in --out and start afresh (a new dashboard run)",
    )
    run.add_argument(
        "--report-to",
        default=None,
        metavar="URL",
        help="also stream the run to this dashboard (token from $DASHBOARD_TOKEN)",
    )
    run.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import this plugin module first (repeatable)",
    )
    run.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help="train with N processes (torchrun); overrides resources.processes",
    )
    sub.add_parser("presets", help="list the algorithm presets and the fields they set")
    from trainer.importers.command import add_import_parser

    add_import_parser(sub)
    export = sub.add_parser(
        "export-model", help="a checkpoint (LoRA merged) -> a plain model directory"
    )
    export.add_argument("source", help="a checkpoint, or a run or checkpoints dir")
    export.add_argument("out", help="the model directory to write")
    export.add_argument(
        "--adapter",
        action="store_true",
        help="LoRA runs: the adapter alone (peft's format) with the tokenizer",
    )
    args = parser.parse_args(argv)
    if args.cmd == "export-model":
        return _cmd_export(args)
    if args.cmd == "presets":
        return _cmd_presets()
    if args.cmd == "import":
        from trainer.importers.command import run_import

        return run_import(args)
    return _cmd_run(args)
