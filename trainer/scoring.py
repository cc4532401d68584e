"""Scoring a batch without gradients: what the sampling policy thought of every
token (old log-probs, entropy, values) and, when the KL term is on, the frozen
reference's log-probs (:func:`score`), in chunks no wider than the update's
micro-batches (:func:`score_chunk`). The optimisation epochs that use them are
:mod:`trainer.update`'s."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.batch import Batch
from trainer.config import OptimConfig
from trainer.policy import Policy


@dataclass
class Scores:
    old_logprobs: torch.Tensor | None  # (B, T-1); None: filled by the first forward
    entropy: torch.Tensor | None  # (B, T-1)
    values: torch.Tensor | None  # (B, T-1)
    ref_logprobs: torch.Tensor | None  # (B, T-1)
    kl_beta: float = 0.0  # this step's KL coefficient in the loss (adaptive or fixed)
    # (B, T-1) int8: why the last epoch's loss left a trained token out (MASK_REASONS
    # index; 0: it did not). None until an update with a token mask ran.
    token_masks: torch.Tensor | None = None


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


# Rows a scoring forward (no gradients) takes at most (``score``).
SCORE_CHUNK = 64


def score_chunk(optim: OptimConfig, width: int = 1) -> int:
    """Rows per scoring forward of rows ``width`` tokens wide: ``SCORE_CHUNK``, or
    fewer where the update goes in smaller micro-batches (what a forward is to
    hold at most: ``micro_batch_size`` rows, ``micro_batch_tokens`` tokens)."""
    rows = SCORE_CHUNK
    if optim.micro_batch_size:
        rows = min(rows, optim.micro_batch_size)
    if optim.micro_batch_tokens:
        rows = min(rows, max(1, optim.micro_batch_tokens // max(width, 1)))
    return rows


@torch.no_grad()
def score(
    policy: Policy,
    ref: Policy | None,
    batch: Batch,
    chunk: int = SCORE_CHUNK,
    *,
    policy_pass: bool = True,
) -> Scores:
    parts: dict[str, list[torch.Tensor]] = {"lp": [], "ent": [], "val": [], "ref": []}
    start = batch.first_trained()
    for sl in _chunks(batch.size, chunk):
        ids, attn = batch.input_ids[sl], batch.attention_mask[sl]
        pre = None if batch.prefixes is None else batch.prefixes.select(sl)
        if policy_pass:
            st = policy.token_stats(
                ids,
                attn,
                with_entropy=True,
                with_values=True,
                start=start,
                prefixes=pre,
            )
            parts["lp"].append(st.logprobs)
            parts["ent"].append(st.entropy)
            if st.values is not None:
                parts["val"].append(st.values)
        if ref is not None:
            parts["ref"].append(
                ref.token_stats(ids, attn, start=start, prefixes=pre).logprobs
            )
    return Scores(
        old_logprobs=torch.cat(parts["lp"]) if parts["lp"] else None,
        entropy=torch.cat(parts["ent"]) if parts["ent"] else None,
        values=torch.cat(parts["val"]) if parts["val"] else None,
        ref_logprobs=torch.cat(parts["ref"]) if parts["ref"] else None,
    )
