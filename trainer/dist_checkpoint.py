"""Checkpoints of a run of several processes, through ``torch.distributed.checkpoint``.

The same ``step-NNNNNN`` directory as :mod:`trainer.checkpoint`, written by every rank
together: ``dcp/`` holds the model and the optimizer (each rank writes what it holds;
with DDP the replicated tensors once, with FSDP2 each rank its shards), ``rank-NNNNN.pt`` each rank's RNG states (every
rank samples its own tokens), ``meta.json`` the step, the KL coefficient and the number
of processes. Rank 0 also writes ``policy.safetensors`` (or a LoRA ``adapter/``) as the
one-process checkpoint does, so ``export-model`` and ``model.init_from_run`` read either.
Written under a temporary name, then renamed by rank 0 once every rank is done: a crash
leaves the whole checkpoint or none of it. A resumed run needs the same number of
processes (the RNG streams are per rank).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from trainer.checkpoint import (
    TrainState,
    _as_rng_state,
    _fsync_dir,
    _fsync_tree,
    list_checkpoints,
    write_weights,
)

# ``par`` below is the run's distributed handle (trainer.distributed.Parallel), typed
# Any: importing it here would close a circle (distributed saves through this module).


def is_sharded(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / "dcp").is_dir()


def save_sharded(
    root: str | os.PathLike[str],
    *,
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    meta: dict[str, Any],
    keep: int,
    par: Any,
) -> Path:
    """Every rank calls it; returns ``root/step-NNNNNN``."""
    root = Path(root)
    final = root / f"step-{state.step:06d}"
    tmp = root / f".tmp-{final.name}-dist"  # one name for every rank
    if par.main:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    par.barrier()
    model_sd, optim_sd = get_state_dict(policy, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / "dcp"))
    torch.save(
        {
            "sample_gen": state.sample_gen.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state()
            if par.device.type == "cuda"
            else None,
        },
        tmp / f"rank-{par.rank:05d}.pt",
    )
    if par.strategy == "fsdp":  # the whole weights gathered by every rank
        from trainer.fsdp import write_full_weights

        write_full_weights(tmp, policy, par)
    elif par.main:
        write_weights(tmp, policy)
    if par.main:
        (tmp / "meta.json").write_text(
            json.dumps(
                {
                    "step": state.step,
                    "kl_coef": state.kl_coef,
                    "processes": par.world,
                    "task_rng": state.task_rng.getstate(),
                    **meta,
                },
                indent=2,
            )
        )
    par.barrier()
    if par.main:
        _fsync_tree(tmp)
        if final.exists():  # a re-run of the same step after a resume
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
        for old in list_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    par.barrier()  # nobody reads the directory before it has its final name
    return final


def check_writers(path: str | os.PathLike[str], have: int) -> dict[str, Any]:
    """The checkpoint's ``meta.json``, once it is known to have been written by
    ``have`` processes (a resumed run needs as many: the RNG streams are per rank)."""
    path = Path(path)
    meta = json.loads((path / "meta.json").read_text())
    wrote = meta.get("processes", 1) if is_sharded(path) else 1
    if wrote != have:
        raise ValueError(
            f"resources.processes: checkpoint {path.name} was written by {wrote} "
            f"process(es), this run has {have}; resume with {wrote}"
        )
    return meta


def restore(
    policy: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoint_id: Path
) -> None:
    """Every rank calls it: the model and the optimizer from ``checkpoint_id``. A
    checkpoint written without ``optim.master_weights``' float32 copies (before them,
    or with them off) loads: the copies the template asks for are left out of the
    load (DCP refuses a key the checkpoint lacks) and dropped after it, so the next
    step makes them from the loaded weights (``trainer.optimizer.MasterAdamW``), not
    from the weights before the load."""
    model_sd, optim_sd = get_state_dict(policy, optimizer)
    saved = dcp.FileSystemReader(str(checkpoint_id)).read_metadata()
    keys = saved.state_dict_metadata.keys()
    absent = [
        fqn
        for fqn, st in optim_sd.get("state", {}).items()
        if "master" in st and f"optim.state.{fqn}.master" not in keys
    ]
    for fqn in absent:
        del optim_sd["state"][fqn]["master"]
    sd = {"model": model_sd, "optim": optim_sd}
    dcp.load(sd, checkpoint_id=str(checkpoint_id))
    set_state_dict(
        policy, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"]
    )
    params = dict(policy.named_parameters())
    for fqn in absent:
        if fqn in params:
            optimizer.state[params[fqn]].pop("master", None)


def load_sharded(
    path: str | os.PathLike[str],
    *,
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    par: Any,
) -> TrainState:
    """Every rank calls it: restores weights, optimizer and this rank's RNGs."""
    path = Path(path)
    meta = check_writers(path, par.world)
    restore(policy, optimizer, path / "dcp")
    blob = torch.load(
        path / f"rank-{par.rank:05d}.pt", weights_only=True, map_location="cpu"
    )
    gen = torch.Generator()
    gen.set_state(blob["sample_gen"])
    torch.set_rng_state(blob["torch_rng"])
    if blob["cuda_rng"] is not None and par.device.type == "cuda":
        torch.cuda.set_rng_state(blob["cuda_rng"])
    task_rng = random.Random()
    task_rng.setstate(_as_rng_state(meta["task_rng"]))
    return TrainState(
        step=int(meta["step"]),
        task_rng=task_rng,
        sample_gen=gen,
        kl_coef=meta.get("kl_coef"),
        monitor=meta.get("monitor"),
    )
