"""The model a run keeps: its newest recorded checkpoint, the downloads it offers,
and the exported directories those downloads stream.

A download is a ``save_pretrained`` directory (``trainer.export``): ``model`` (a LoRA
run's adapter merged into its base; a full run's weights; a built-in model as a small
Llama with its word-level tokenizer, which the trainer loads back as ``model.path``)
or, for a LoRA run, ``adapter`` (peft's files and the base's tokenizer). Each is built
once per checkpoint, under ``RUNS_DIR/<run id>/exports/<kind>-step-NNNNNN`` (written
under a temporary name, then renamed; a file lock keeps two requests from building
the same one), and older exports are dropped when a newer one is built. Building a
merged model loads the base model in the process that serves the request.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from dashboard.errors import InvalidConfig, NotFound
from dashboard.library import roots
from dashboard.library.filenames import ascii_name
from dashboard.runs.execution import checkpoint_dir, newest_checkpoint

log = logging.getLogger(__name__)

KINDS = {
    "model": "the model directory (save_pretrained)",
    "adapter": "the LoRA adapter (peft)",
}


@dataclass(frozen=True)
class KeptModel:
    """What the run page and the API say about a run's model."""

    step: int
    steps: int  # the run's configured steps
    kinds: tuple[str, ...]
    lora: bool
    base: str  # model.path, or "built-in <size>"
    builtin: bool  # no model.path: the trainer's own small Llama

    @property
    def final(self) -> bool:
        return self.step >= self.steps


def kept_model(run: Any) -> KeptModel | None:
    """The run's model, or None (an external run's checkpoints stay where it
    trained; a run that has not reached its first checkpoint keeps none yet)."""
    if run.external:
        return None
    ckpt = newest_checkpoint(run.pk)
    if ckpt is None:
        return None
    from trainer.export import checkpoint_config, export_kinds

    try:
        cfg = checkpoint_config(ckpt)
        kinds = tuple(export_kinds(ckpt))
    except (OSError, ValueError, KeyError):
        log.warning("run %s: unreadable checkpoint %s", run.pk, ckpt.name)
        return None
    return KeptModel(
        step=int(ckpt.name.split("-")[-1]),
        steps=cfg.steps,
        kinds=kinds,
        lora=cfg.model.lora is not None,
        base=(
            roots.shown(str(cfg.model.path), model=True)
            if cfg.model.path
            else f"built-in {cfg.model.size}"
        ),
        builtin=not cfg.model.path,
    )


def check_kind(kind: str, kept: KeptModel) -> str:
    if kind not in KINDS:
        raise InvalidConfig(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if kind not in kept.kinds:
        raise InvalidConfig(
            f"kind: {kind!r}: this run trained all weights (no LoRA adapter); "
            "use kind=model"
        )
    return kind


def model_directory(run: Any, kind: str) -> tuple[Path, KeptModel]:
    """The exported directory of ``kind`` for the run's newest checkpoint, built now
    if it is not yet; NotFound when the run keeps no model, InvalidConfig for a
    ``kind`` it does not offer."""
    kept = kept_model(run)
    if kept is None:
        raise NotFound(
            "model: this run has no checkpoint on this platform (yet: a run keeps "
            "one every checkpoint.every steps and after its last step)"
        )
    check_kind(kind, kept)
    root = exports_dir(run.pk)
    target = root / f"{kind}-step-{kept.step:06d}"
    if target.is_dir():
        return target, kept
    from trainer.export import export

    source = checkpoint_dir(run.pk) / f"step-{kept.step:06d}"
    with _locked(root):
        if not target.is_dir():  # another request may have built it meanwhile
            tmp = root / f".tmp-{target.name}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                export(source, tmp, kind)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            _drop_older(root, kind, kept.step)
    return target, kept


def archive_name(run: Any, kept: KeptModel, kind: str) -> str:
    """The top folder of the archive: the run's name, the kind and the step, in
    characters every file system and shell takes."""
    slug = ascii_name(run.name or "run", 60)
    return f"{slug or 'run'}-{kind}-step-{kept.step}"


def exports_dir(run_id: Any) -> Path:
    return Path(settings.RUNS_DIR) / str(run_id) / "exports"


@contextmanager
def _locked(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _drop_older(root: Path, kind: str, step: int) -> None:
    name = re.compile(rf"^{kind}-step-(\d+)$")
    for p in root.iterdir():
        m = name.match(p.name)
        if m and int(m.group(1)) < step:
            shutil.rmtree(p, ignore_errors=True)
