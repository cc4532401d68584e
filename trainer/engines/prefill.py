"""The first forward of a generation: every distinct context read once.

A group's G rollouts share their prompt on the first turn: each distinct context
goes through the model once and its KV cache is gathered out to every row that
starts with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

if TYPE_CHECKING:
    from trainer.policy import Policy


def prefill(
    policy: Policy, contexts: list[list[int]]
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward over the contexts, left-padded: the model's output (its KV
    cache), each row's next-token logits (B, V), attention mask and positions
    (both (B, P))."""
    from trainer.policy import left_pad

    dev = policy.device
    table: dict[tuple[int, ...], int] = {}
    of_row = [table.setdefault(tuple(c), len(table)) for c in contexts]
    unique = list(table)
    ids, mask = left_pad(unique, policy.pad_id, dev)
    # Left padding: positions count real tokens only, so a row's positions do not
    # depend on how long its neighbours are.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = policy.model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        cache=DynamicCache(),
        use_cache=True,
        logits_to_keep=1,
    )
    logits = out.logits[:, -1, :]
    if len(unique) < len(contexts):
        rows = torch.tensor(of_row, device=dev)
        out.cache.batch_select_indices(rows)
        logits, mask, positions = logits[rows], mask[rows], positions[rows]
    return out, logits, mask, positions
