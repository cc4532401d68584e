"""Rows of a batch: the distinct prompts its rows begin with (:class:`Prefixes`),
rows taken with a gradient summed in a fixed order (:func:`take_rows`,
:func:`select_rows` for a KV cache), token id lists padded on the left
(:func:`left_pad`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


@dataclass
class Prefixes:
    """The distinct prompts of a batch, for scoring each one once: a group's G
    rollouts all start with the same prompt. ``ids``/``mask`` are (U, P), left-padded;
    row ``b`` of the batch starts with prompt ``of_row[b]``, ``length[b]`` tokens."""

    ids: torch.Tensor
    mask: torch.Tensor
    of_row: torch.Tensor  # (B,)
    length: torch.Tensor  # (B,)

    def select(self, idx: torch.Tensor) -> Prefixes:
        return Prefixes(self.ids, self.mask, self.of_row[idx], self.length[idx])


def shares_prefix(attention_mask: torch.Tensor, prefixes: Prefixes) -> bool:
    """Whether :meth:`Policy.token_stats` reads ``prefixes`` once for the rows that
    share them (two forwards) rather than every row whole (one): some prompt is
    shared by two rows, and every row has tokens after its prompt."""
    rest = attention_mask.sum(1) - prefixes.length
    distinct = len(torch.unique(prefixes.of_row))
    return distinct < attention_mask.shape[0] and not bool((rest <= 0).any())


_PLAIN_LAYERS = (DynamicLayer, DynamicSlidingWindowLayer)


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of ``x`` (dim 0), with a gradient summed in the same order
    every run: on the CPU through ``index_select``, whose backward adds the rows in
    turn (advanced indexing's accumulates them from several threads at once, in
    whatever order they meet: a run's numbers moved by ~1e-7 from one process to the
    next, then diverged); elsewhere through advanced indexing, whose CUDA backward
    sorts where ``index_select``'s adds atomically."""
    return x.index_select(0, index) if x.device.type == "cpu" else x[index]


def select_rows(cache: DynamicCache, index: torch.Tensor) -> None:
    """``cache.batch_select_indices(index)`` through :func:`take_rows` for the
    layers that hold just keys and values (the rest select their own way)."""
    for layer in cache.layers:
        if type(layer) in _PLAIN_LAYERS and layer.get_seq_length() > 0:
            layer.keys = take_rows(layer.keys, index)
            layer.values = take_rows(layer.values, index)
        else:
            layer.batch_select_indices(index)


def left_pad(
    seqs: list[list[int]] | list[tuple[int, ...]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> (ids, attention mask), both (N, longest), padded on the left."""
    width = max(len(q) for q in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, q in enumerate(seqs):
        ids[i, width - len(q) :] = torch.tensor(q, dtype=torch.long)
        mask[i, width - len(q) :] = 1
    return ids.to(device), mask.to(device)
