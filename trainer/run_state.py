"""A run's state across steps: loading and saving checkpoints (one file, or sharded
with several processes), the frozen KL reference, and the collector's freeze.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.algorithms import ResolvedAlgorithm
from trainer.checkpoint import TrainState
from trainer.config import TrainConfig
from trainer.policy import AdaptersOff, Policy

if TYPE_CHECKING:
    from trainer.single import Handle


def load_state(
    path: Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    par: Handle,
) -> TrainState:
    """Every process restores the checkpoint it can read: one file alone, its
    shards among several (``Single.load`` / ``Parallel.load``)."""
    return par.load(path, policy, optimizer)


def save_state(
    root: str | Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    config: TrainConfig,
    par: Handle,
    monitor: Any = None,
) -> Path:
    meta: dict[str, Any] = {"config": config.model_dump(mode="json")}
    kept = getattr(monitor, "state_dict", None)  # rank 0's detectors, if they keep one
    if callable(kept):
        meta["monitor"] = kept()
    return par.save(
        root, policy, optimizer, state, meta=meta, keep=config.checkpoint.keep
    )


def freeze_long_lived() -> bool:
    """Move what is alive when the step loop starts (imported modules, the model, the
    environment's corpus: hundreds of thousands of objects that live as long as the
    run) out of the cyclic collector's reach, so that each full collection scans only
    what the steps allocate. On a 2-core machine a full collection over them took
    0.2-0.5 s, and the records of a step trigger some. Skipped if the host process
    froze objects itself; undone when the run ends."""
    if gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True


def reference_copy(
    policy: Policy, algo: ResolvedAlgorithm, par: Handle
) -> Policy | None:
    """fsdp: the whole frozen copy that will hold the KL reference, taken while the
    policy is still whole (a sharded module cannot be copied); its weights are set
    by :func:`reference_policy`. Otherwise None (the copy is taken there)."""
    if par.strategy != "fsdp" or algo.kl_beta <= 0 or policy.lora:
        return None
    return policy.frozen_copy()


def reference_policy(
    policy: Policy,
    algo: ResolvedAlgorithm,
    checkpoint_dir: str | Path | None,
    par: Handle,
    *,
    whole: Policy | None = None,
) -> Policy | AdaptersOff | None:
    """The frozen KL reference is the policy as RL began (after any warm start); it is
    saved once beside the checkpoints so a resumed run compares against the same one
    (by rank 0; every rank holds the same one). ``whole``: with fsdp, the copy from
    :func:`reference_copy`, given the sharded policy's gathered weights (every rank
    calls this together)."""
    if algo.kl_beta <= 0:
        return None
    if policy.lora:  # the base model, adapters off: no copy, nothing to save
        return policy.adapters_off()
    from safetensors.torch import load_model, save_model

    if whole is not None:
        from trainer.fsdp import refresh_reference

        refresh_reference(whole, policy)
        ref = whole
    else:
        ref = policy.frozen_copy()
    if checkpoint_dir is not None:
        path = Path(checkpoint_dir) / "reference.safetensors"
        exists = path.exists()
        par.barrier()  # every rank has looked before rank 0 writes it
        if exists:
            load_model(ref, str(path), strict=False)
        elif par.main:
            path.parent.mkdir(parents=True, exist_ok=True)
            save_model(ref, str(path))
    return ref
