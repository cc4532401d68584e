"""The first forward of a generation: every distinct context read once.

A group's G rollouts share their prompt on the first turn: each distinct context
goes through the model once and its KV cache is gathered out to every row that
starts with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

if TYPE_CHECKING:
    from trainer.policy import Policy


def prefill(
    policy: Policy, contexts: list[list[int]]
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward over the contexts, left-padded: the model's output (its KV
    cache), each row's next-token logits (B, V), attention mask and positions
    (both (B, P))."""
    from trainer.rows import left_pad

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


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in a buffer reserved for
    ``capacity`` positions: a decode step writes its token's keys and values in place
    and the layer's ``keys``/``values`` are views of the filled part, where the
    dynamic layer concatenates (copying the whole cache, every layer, every token:
    a fifth of a CPU decode step at ~300-token contexts). Dropping rows
    (``batch_select_indices``) copies the buffer once; running out of room grows it."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        self.device, self.is_initialized = keys.device, True
        self._n = keys.shape[-2]
        self._k = self._reserve(keys, capacity)
        self._v = self._reserve(values, capacity)
        self._view()

    @staticmethod
    def _reserve(x: torch.Tensor, capacity: int) -> torch.Tensor:
        b, h, n, d = x.shape
        buf = x.new_empty((b, h, max(capacity, n), d))
        buf[:, :, :n] = x
        return buf

    def _view(self) -> None:
        self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]

    def update(self, key_states, value_states, *args, **kwargs):
        n, m = self._n, key_states.shape[-2]
        if n + m > self._k.shape[-2]:
            self._k = self._reserve(self._k[:, :, :n], 2 * (n + m))
            self._v = self._reserve(self._v[:, :, :n], 2 * (n + m))
        self._k[:, :, n : n + m] = key_states
        self._v[:, :, n : n + m] = value_states
        self._n = n + m
        self._view()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._view()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self._n:
            self._n = max(0, self._n + tokens_to_remove)
            self._view()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k = self._k.repeat_interleave(repeats, dim=0)
        self._v = self._v.repeat_interleave(repeats, dim=0)
        self._view()


def reserve(cache: DynamicCache, extra: int) -> DynamicCache:
    """``cache`` with each layer's room for ``extra`` more positions reserved
    (:class:`ReservedLayer`); layers that are not plain dynamic ones (sliding
    windows) are left as they are."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and extra > 0:
            n = layer.keys.shape[-2]
            cache.layers[i] = ReservedLayer(layer.keys, layer.values, n + extra)
    return cache
