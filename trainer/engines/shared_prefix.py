"""Shared prefixes' attention for the slot rows (:mod:`trainer.engines.slots`).

A GRPO group's rows begin from one prompt. :meth:`~trainer.engines.slots.
SlotCache.share` keeps it once, in a row of the cache's ``prefix`` cache, and each
row holds only what follows it. A forward's query rows then attend two things:
their prefix, read once for all the rows that share it (the rows' queries gathered
into one product per prefix, :class:`SlotPrefix`), and their own columns; the two
softmaxes are joined through their log-sum-exps (:func:`attention_lse`), which
gives the attention over the whole context as one sequence, to float rounding.
The buffers then hold a prompt once rather than G times, and a decode step reads
its keys and values once rather than G times: on an accelerator, where a big
batch's decode step reads more keys and values than weights, that is most of its
memory traffic. On the CPU a second attention call a layer costs more than the
keys it saves reading (bench/rollout_bench.py), so the engine copies there by
default (``ContinuousEngine.shared_prefix``).
"""

from __future__ import annotations

from typing import Any

import torch


class SlotPrefix:
    """A forward's shared prefixes (:meth:`SlotCache.share`): query row i, whose
    row shares prefix row ``bases[i]`` of ``cache`` (-1: none), attends that
    row's columns as well as its own. The query rows of one prefix are gathered
    and attend it in one product, so a prefix's keys and values are read once
    for all the rows that share it; :func:`slot_attention` adds that attention
    to the rows' own through the two parts' log-sum-exps."""

    def __init__(self, cache: Any, bases: list[int], device, dtype) -> None:
        self.cache = cache
        used = sorted({b for b in bases if b >= 0})
        members: dict[int, list[int]] = {b: [] for b in used}
        for i, b in enumerate(bases):
            if b >= 0:
                members[b].append(i)
        per = max(len(m) for m in members.values())
        n = len(bases)  # index n: a zero query (padding), a none output
        take = [m + [n] * (per - len(m)) for m in members.values()]
        where = [len(used) * per] * n
        for k, m in enumerate(members.values()):
            for j, i in enumerate(m):
                where[i] = k * per + j
        lengths = [cache.length[b] for b in used]
        self.width = max(lengths)
        see = torch.arange(self.width) < torch.tensor(lengths)[:, None]
        mask = torch.zeros(see.shape, dtype=dtype).masked_fill_(
            ~see, torch.finfo(dtype).min
        )
        self.mask = mask[:, None, None].to(device)  # (B, 1, 1, width)
        # The prefix rows in use: a slice of the buffers where they are the first.
        self.rows = (
            None
            if used == list(range(len(used)))
            else torch.tensor(used, device=device)
        )
        self.count = len(used)
        self.take = torch.tensor(take, device=device).flatten()
        self.where = torch.tensor(where, device=device)
        self.per = per

    def attend(self, query: torch.Tensor, layer: int, scale: float):
        """Query rows (n, heads, q, dim) against their prefixes in layer
        ``layer``: the outputs (n, heads, q, dim) and log-sum-exps (n, heads, q),
        -inf for a row with none."""
        n, h, q, d = query.shape
        b = self.count
        keys = self.cache.keys[layer][:, :, : self.width]
        values = self.cache.values[layer][:, :, : self.width]
        if self.rows is None:  # the first b rows: a view
            keys, values = keys[:b], values[:b]
        else:
            keys, values = (
                keys.index_select(0, self.rows),
                values.index_select(0, self.rows),
            )
        padded = torch.cat([query, query.new_zeros((1, h, q, d))])
        grouped = padded.index_select(0, self.take).view(b, self.per, h, q, d)
        grouped = grouped.transpose(1, 2).reshape(b, h, self.per * q, d)
        out, lse = attention_lse(grouped, keys, values, self.mask, scale)
        out = out.view(b, h, self.per, q, d).transpose(1, 2).reshape(-1, h, q, d)
        lse = lse.view(b, h, self.per, q).transpose(1, 2).reshape(-1, h, q)
        out = torch.cat([out, out.new_zeros((1, h, q, d))]).index_select(0, self.where)
        none = lse.new_full((1, h, q), float("-inf"))
        return out, torch.cat([lse, none]).index_select(0, self.where)


def _fused_lse(q: torch.Tensor) -> bool:
    """Whether the fused kernel that returns log-sum-exps serves ``q``'s device."""
    return q.device.type == "cpu"


def attention_lse(q, k, v, mask, scale: float):
    """Attention of queries (n, heads, q, dim) over keys and values (n, kv_heads,
    w, dim), ``heads`` a multiple of ``kv_heads`` (grouped-query: each key head's
    queries attend as one longer query row), under the additive ``mask`` (n, 1, q
    or 1, w): the outputs and their log-sum-exps (n, heads, q). On the CPU the
    fused kernel that ``scaled_dot_product_attention`` calls there, which returns
    both; elsewhere as products (an accelerator's decode step reads the keys and
    values once either way)."""
    n, h, length, d = q.shape
    kv, w = k.shape[1], k.shape[2]
    g = h // kv
    if g > 1:
        q = q.reshape(n, kv, g * length, d)
        if mask.shape[2] > 1:
            mask = mask[:, :, None].expand(n, 1, g, length, w)
            mask = mask.reshape(n, 1, g * length, w)
    if _fused_lse(q):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=mask, scale=scale
        )
    else:
        # Scores and softmax in float32, as attention kernels keep them in bf16
        # and fp16 runs (scores rounded to bf16 first err ~20x more).
        if q.dtype != torch.float32:
            q, k, v = q.float(), k.float(), v.float()
        scores = ((q * scale) @ k.transpose(-1, -2)).add_(mask)
        lse = scores.logsumexp(-1)
        out = scores.sub_(lse[..., None]).exp_() @ v  # float32: slot_attention casts
    return out.reshape(n, h, length, d), lse.reshape(n, h, length)
