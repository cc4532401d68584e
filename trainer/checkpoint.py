"""Checkpoints: weights (safetensors), optimizer, RNG states and step, written atomically.

A LoRA policy's checkpoint holds its adapter (``adapter/``, peft's format) and only its
trained weights; ``python -m trainer export-model`` merges the adapter into the base.

A checkpoint is a directory ``step-000010`` inside the run's checkpoint directory. It is
written under a temporary name, fsync'd, then renamed, so a crash (even ``kill -9``)
leaves either the whole checkpoint or none of it. Restoring every RNG the trainer draws
from (task sampling, token sampling, torch's global generator) makes a resumed run
continue bit for bit like an uninterrupted one on CPU.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_file, save_model

_NAME = re.compile(r"^step-(\d{6,})$")


@dataclass
class TrainState:
    """Everything besides the weights that a resumed run needs."""

    step: int
    task_rng: random.Random
    sample_gen: torch.Generator
    kl_coef: float | None = None  # the adaptive KL coefficient; None: not adapted yet
    # The detectors' memory (``RewardMonitor.state_dict``): a resumed run neither
    # alerts again on what it already alerted on nor takes its resume for its start.
    monitor: dict[str, Any] | None = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(path)


def save_checkpoint(
    root: str | os.PathLike[str],
    *,
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    meta: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write ``root/step-NNNNNN`` atomically and keep the newest ``keep`` checkpoints."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step:06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write_weights(tmp, policy)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "task_rng": state.task_rng.getstate(),
            "sample_gen": state.sample_gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all()
            if torch.cuda.is_available()
            else [],
        },
        tmp / "state.pt",
    )
    (tmp / "meta.json").write_text(
        json.dumps({"step": state.step, "kl_coef": state.kl_coef, **meta}, indent=2)
    )
    _fsync_tree(tmp)
    if final.exists():  # a re-run of the same step after a resume: replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def write_weights(directory: Path, policy: torch.nn.Module) -> None:
    """The weights file(s) of a checkpoint directory."""
    if getattr(policy, "lora", False):
        # LoRA: the adapter as peft writes it (what export-model merges), and the
        # trained weights alone (adapters, value head) for a resume; the base model
        # stays where model.path says.
        policy.model.save_pretrained(directory / "adapter")
        save_file(
            {n: p.detach().contiguous() for n, p in _trainable(policy).items()},
            str(directory / "policy.safetensors"),
        )
    else:
        # save_model (not save_file) handles tied embeddings, which share storage.
        save_model(policy, str(directory / "policy.safetensors"))


def list_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """Complete checkpoints, oldest first (temporary directories are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(root: str | os.PathLike[str] | None) -> Path | None:
    if root is None:
        return None
    found = list_checkpoints(root)
    return found[-1] if found else None


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
) -> TrainState:
    """Restore weights, optimizer and RNGs in place; returns the saved step and RNGs."""
    path = Path(path)
    missing, unexpected = load_model(
        policy, str(path / "policy.safetensors"), strict=False
    )
    if getattr(policy, "lora", False):  # only the trained weights were saved
        missing = [m for m in missing if m in _trainable(policy)]
    if unexpected or [m for m in missing if "lm_head" not in m]:
        raise ValueError(
            f"checkpoint {path} does not match the model: {missing} {unexpected}"
        )
    blob = torch.load(path / "state.pt", weights_only=True, map_location="cpu")
    optimizer.load_state_dict(blob["optimizer"])
    task_rng = random.Random()
    task_rng.setstate(_as_rng_state(blob["task_rng"]))
    gen = torch.Generator()
    gen.set_state(blob["sample_gen"])
    torch.set_rng_state(blob["torch_rng"])
    if blob["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    meta = json.loads((path / "meta.json").read_text())
    return TrainState(
        step=int(meta["step"]),
        task_rng=task_rng,
        sample_gen=gen,
        kl_coef=meta.get("kl_coef"),
        monitor=meta.get("monitor"),
    )


def load_weights(path: str | os.PathLike[str], *, policy: torch.nn.Module) -> None:
    """Only the weights of checkpoint ``path`` (another run's, ``init_from_run``):
    the optimizer, RNGs and step start afresh. A value head the checkpoint lacks
    (it came from a critic-free run) stays freshly initialised."""
    path = Path(path)
    missing, unexpected = load_model(
        policy, str(path / "policy.safetensors"), strict=False
    )
    if getattr(policy, "lora", False):
        missing = [m for m in missing if m in _trainable(policy)]
    missing = [m for m in missing if "lm_head" not in m and "value_head" not in m]
    unexpected = [u for u in unexpected if "value_head" not in u]
    if unexpected or missing:
        raise ValueError(
            f"checkpoint {path.name} does not match the model: {missing} {unexpected}"
        )


def _trainable(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in policy.named_parameters() if p.requires_grad}


def _as_rng_state(raw: Any) -> tuple:
    version, internal, gauss = raw
    return (version, tuple(internal), gauss)
