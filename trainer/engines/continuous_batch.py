"""Continuous batching for models whose layers the slot rows do not fit.

:mod:`trainer.engines.slots` needs every layer to attend to the whole context
through a 4-D mask; a model with sliding-window layers, or an attention that
builds its own mask (flash attention), keeps its episodes here instead: the
decode batch is a ``DynamicCache`` re-formed as rows leave (their keys and values
copied out, trimmed of left padding) and join (copied back in, left-padded to the
batch's width). The same episodes, more copying.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from trainer.engines.episodes import Scheduler
from trainer.engines.prefill import prefill


@dataclass
class _Held:
    """An episode's KV rows out of the batch (trimmed of left padding), their
    mask, and the position of the next token fed."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor  # (1, L)
    pos: int


@dataclass
class _Batch:
    """The decode batch: row k is episode ``rows[k]``."""

    rows: list[int]
    cache: DynamicCache
    mask: torch.Tensor  # (n, L)
    pos: torch.Tensor  # (n, 1): position of the token fed next
    logits: torch.Tensor  # (n, V)


class BatchRun(Scheduler):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.held: dict[int, _Held] = {}
        self.batch: _Batch | None = None

    def _decoding(self) -> int:
        return len(self.batch.rows) if self.batch is not None else 0

    def _ended(self, e: int) -> None:
        self.held.pop(e, None)

    def _admit(self, joining: list[int]) -> None:
        """New episodes prefilled, returning ones extended by their pending tokens
        on top of their own KV cache."""
        new = [e for e in joining if e not in self.held]
        back = [e for e in joining if e in self.held]
        for part in (self._prefill(new), self._extend(back)):
            if part is not None:
                self.batch = part if self.batch is None else _concat(self.batch, part)

    def _prefill(self, eps: list[int]) -> _Batch | None:
        if not eps:
            return None
        out, logits, mask, positions = prefill(
            self.policy, [self.pending[e] for e in eps]
        )
        return _Batch(eps, out.cache, mask, positions[:, -1:] + 1, logits)

    def _extend(self, eps: list[int]) -> _Batch | None:
        if not eps:
            return None
        from trainer.rows import left_pad

        dev = self.policy.device
        helds = [self.held[e] for e in eps]
        width = max(h.mask.shape[1] for h in helds)
        cache = DynamicCache()
        for i in range(len(helds[0].kv)):
            keys = torch.cat([_lpad(h.kv[i][0], width) for h in helds])
            values = torch.cat([_lpad(h.kv[i][1], width) for h in helds])
            cache.update(keys, values, i)
        old_mask = torch.cat([_lpad(h.mask, width) for h in helds])
        ids, new_mask = left_pad(
            [self.pending[e] for e in eps], self.policy.pad_id, dev
        )
        start = torch.tensor([[h.pos] for h in helds], device=dev)
        positions = start + (new_mask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([old_mask, new_mask], dim=1)
        out = self.policy.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        pos = positions[:, -1:] + 1
        return _Batch(eps, out.cache, mask, pos, out.logits[:, -1, :])

    def _step(self) -> None:
        """Sample one token of every row; finished rows leave, the rest go on."""
        b = self.batch
        toks, lps = self._sample(b.logits, b.rows)
        keep: list[int] = []
        for k, e in enumerate(b.rows):
            if self._took(e, toks[k], lps[k]):
                self._leave(k, e)
            else:
                keep.append(k)
        if not keep:
            self.batch = None
            return
        if len(keep) < len(b.rows):
            _select(b, keep)
        tok = torch.tensor([toks[k] for k in keep], device=b.mask.device)
        b.mask = torch.cat([b.mask, torch.ones_like(b.mask[:, :1])], dim=1)
        out = self.policy.model(
            input_ids=tok.unsqueeze(1),
            attention_mask=b.mask,
            position_ids=b.pos,
            cache=b.cache,
            use_cache=True,
        )
        b.cache, b.logits, b.pos = out.cache, out.logits[:, -1, :], b.pos + 1

    def _leave(self, k: int, e: int) -> None:
        """Row k's action is over: keep its KV rows, dispatch its action."""
        b = self.batch
        row = b.mask[k]
        first = int(row.nonzero()[0])
        self.held[e] = _Held(
            [
                (layer.keys[k : k + 1, :, first:], layer.values[k : k + 1, :, first:])
                for layer in b.cache.layers
            ],
            row[first:].unsqueeze(0),
            int(b.pos[k]),
        )
        self._dispatch(e)


def _lpad(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zeros on the left of the sequence axis (-2 for K/V, -1 for a mask) up to
    ``width``."""
    axis = -2 if x.dim() == 4 else -1
    extra = width - x.shape[axis]
    if extra <= 0:
        return x
    shape = list(x.shape)
    shape[axis] = extra
    return torch.cat([x.new_zeros(shape), x], dim=axis)


def _concat(a: _Batch, b: _Batch) -> _Batch:
    """Two batches as one, the narrower left-padded (masked) to the wider."""
    width = max(a.mask.shape[1], b.mask.shape[1])
    for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
        la.keys = torch.cat([_lpad(la.keys, width), _lpad(lb.keys, width)])
        la.values = torch.cat([_lpad(la.values, width), _lpad(lb.values, width)])
    return _Batch(
        a.rows + b.rows,
        a.cache,
        torch.cat([_lpad(a.mask, width), _lpad(b.mask, width)]),
        torch.cat([a.pos, b.pos]),
        torch.cat([a.logits, b.logits]),
    )


def _select(b: _Batch, keep: list[int]) -> None:
    """Keep rows ``keep``; drop the columns left of every kept row's first token."""
    idx = torch.tensor(keep, device=b.mask.device)
    b.cache.batch_select_indices(idx)
    b.rows = [b.rows[k] for k in keep]
    b.mask, b.pos, b.logits = b.mask[idx], b.pos[idx], b.logits[idx]
    first = int(b.mask.any(0).nonzero()[0])
    if first:
        for layer in b.cache.layers:
            layer.keys = layer.keys[:, :, first:]
            layer.values = layer.values[:, :, first:]
        b.mask = b.mask[:, first:]
