"""FSDP2 (``fully_shard``): the policy's weights, gradients and optimizer state split
across the ranks of a run (``resources.strategy: fsdp``).

Each decoder layer is its own shard group, then the rest of the model (embeddings,
final norm, the tied head) and the value head, if any. Sharding swaps parameters for
``DTensor``s, so it happens before the optimizer is built. Gradients are averaged over
the ranks as DDP's are, so :func:`trainer.accumulate.loss_scales` holds unchanged.

A sharded module all-gathers its weights in every forward, a collective: every rank
must run the same forwards. Generation and scoring do not (each rank plays and scores
its own tasks, of its own lengths), so they run inside :func:`gathered`: all ranks
gather the whole model together, run what they need alone, and free it together.
Between those, only the update's forwards and backwards touch the shards, alike on
every rank: as many minibatches and micro-batches everywhere (``optimise``,
``trainer.accumulate``), and shared prompts read once only where every rank's rows
allow it (``Parallel.token_stats``: one forward or two, the same on every rank).
Micro-batches before a minibatch's last keep their gradients whole, added to
(:func:`gradient_sync`); the last reduce-scatters the sum.

What stays whole on every rank: the model while it is built (``Policy.build`` makes
it whole before it is sharded), the frozen KL reference (a full copy, refreshed from
the gathered weights by :func:`refresh_reference`) and the full weights rank 0 writes
beside a checkpoint (:func:`write_full_weights`). LoRA is refused at config time.

This module knows nothing of Django or of how processes are launched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from trainer.policy import Policy


# ``par`` below is the run's distributed handle (trainer.distributed.Parallel), typed
# Any: importing it here would close a circle (distributed saves through this module).


def available() -> bool:
    """Whether this torch has FSDP2's ``fully_shard``."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return False
    return True


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: modules whose class name ends with
    ``DecoderLayer`` (Llama, Qwen, Mistral, ...), else the children of a
    ``layers`` or ``h`` list; outermost only."""
    found = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    if not found:
        for name, m in model.named_modules():
            if isinstance(m, nn.ModuleList) and name.rsplit(".", 1)[-1] in (
                "layers",
                "h",
            ):
                found = list(m)
                break
    inner = {id(sub) for m in found for sub in m.modules() if sub is not m}
    return [m for m in found if id(m) not in inner]


def shard(policy: Policy, par: Any) -> None:
    """fsdp: ``fully_shard`` the policy's layers, then its model and its value head
    (before its optimizer is built). ddp, or one process: nothing."""
    if par.strategy != "fsdp":
        return
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(par.device.type, (par.world,))
    for layer in decoder_layers(policy.model):
        fully_shard(layer, mesh=mesh)
    fully_shard(policy.model, mesh=mesh)
    if policy.value_head is not None:
        fully_shard(policy.value_head, mesh=mesh)


def _sharded(module: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


@contextmanager
def gathered(policy: Policy, par: Any) -> Iterator[None]:
    """With fsdp, the whole model on every rank for the block: each rank may then run
    as many forwards as it likes (generation, scoring) without collectives. Every
    rank enters and leaves together (an all-gather at the start). Otherwise a no-op."""
    if par.strategy != "fsdp":
        yield
        return
    mods = _sharded(policy)
    for m in mods:  # one all-gather per shard group, in the same order everywhere
        m.unshard()
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m in mods:
            m.reshard()
            m.set_reshard_after_forward(True, recurse=False)


@contextmanager
def gradient_sync(policy: Policy, on: bool) -> Iterator[None]:
    """Backwards in the block reduce-scatter their gradients across the ranks
    (``on``) or keep them whole on each rank, added to (a micro-batch before the
    minibatch's last); back on after it."""
    mods = _sharded(policy)
    for m in mods:
        m.set_requires_gradient_sync(on, recurse=False)
    try:
        yield
    finally:
        for m in mods:
            m.set_requires_gradient_sync(True, recurse=False)


def full_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's state dict with whole tensors on every rank (a collective)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))


def refresh_reference(ref: Policy, policy: Policy) -> None:
    """Load the sharded policy's current weights into ``ref``, a whole copy taken
    before sharding (every rank calls it)."""
    ref.load_state_dict(full_state(policy), strict=False)


def write_full_weights(directory: Path, policy: Policy, par: Any) -> None:
    """``policy.safetensors`` as one process writes it (every rank calls it, rank 0
    writes): tied weights once, under the name ``save_model`` keeps."""
    from safetensors.torch import save_file

    state = full_state(policy)
    if not par.main:
        return
    aliases: dict[int, list[str]] = {}
    for name, p in policy.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    for names in aliases.values():
        for name in sorted(names)[1:]:
            state.pop(name, None)
    save_file(
        {k: v.detach().contiguous() for k, v in state.items()},
        str(directory / "policy.safetensors"),
    )
