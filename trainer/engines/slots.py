"""Episodes' KV caches kept in place: one buffer row per episode slot.

Row ``r`` of every layer's key and value buffers, shape (rows, heads, capacity,
head_dim), holds its episode's tokens at columns ``0 .. length[r] - 1``: a token's
column is its position. A decode step writes each row's new token at its own next
column; an episode that leaves the batch for its environment step leaves its keys
and values where they are, and rejoins by writing its observation after them. So
nothing is copied when rows leave or rejoin, and a decode step copies no cache at
all (a concatenating cache copies all of it, every layer, every token).

The model is told where each token goes and what it may see through its
arguments alone: ``position_ids`` (a token's column) and a 4-D additive
``attention_mask`` (row, 1, query, key column) that transformers passes to the
attention as it is. A forward feeds a set of rows (:meth:`SlotCache.feed`, new
episodes' contexts): every row (the buffers are the keys and values, no copy) or
some of them (their rows gathered). A decode step (:meth:`SlotCache.step`) is one
query per row, plus the observations of episodes back from their tool calls, each
token a query of its own that attends its row through :func:`slot_attention` (the
attention a slot run sets on the model), so rejoining costs no forward and no copy.
Rows fed nothing this forward, and the left padding of a row fed fewer tokens than
others, are *blank* queries: they write to a scratch column no row reads and
attend column 0 only, so that their softmax is defined; their outputs are thrown
away.

This layout needs a model whose layers all attend to the whole context through
``cache.update`` (no sliding windows) with an attention chosen through
transformers' interface (``sdpa``, ``eager``): :func:`supports` says whether a
model is one.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from trainer.engines.shared_prefix import SlotPrefix, attention_lse

BLANK_POSITION = 1  # a blank query's position; it attends column 0 only
ATTENTION = "agentic_rl_slots"  # the attention implementation a slot run sets


def supports(model: Any) -> bool:
    """Whether ``model``'s attention can run on slot rows: full attention in every
    layer, and an attention implementation that takes a 4-D mask as it is."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        return False
    window = getattr(config, "sliding_window", None)
    return not window or getattr(config, "use_sliding_window", True) is False


class _Queries:
    """A forward's queries, one list per query row: token ids, positions, the last
    column each sees (its own position; 0 for a blank one), the buffer row and the
    column each writes."""

    def __init__(self, pad_id: int, scratch: int) -> None:
        self.pad_id, self.scratch = pad_id, scratch  # where blank queries write
        self.ids: list[list[int]] = []
        self.pos: list[list[int]] = []
        self.sees: list[list[int]] = []
        self.at: list[list[int]] = []
        self.cols: list[list[int]] = []
        self.real: list[bool] = []  # the query row has a token (not all blank)

    def add(
        self, row: int, tokens: list[int], start: int, width: int, offset: int = 0
    ) -> None:
        """``tokens`` for ``row`` at positions ``start``.., right-aligned in a
        query row of ``width`` (blank queries before them); position p goes to
        the row's column p - ``offset`` (its shared prefix's length)."""
        blank = width - len(tokens)
        span = list(range(start, start + len(tokens)))
        cols = [p - offset for p in span]
        self.ids.append([self.pad_id] * blank + list(tokens))
        self.pos.append([BLANK_POSITION] * blank + span)
        self.sees.append([0] * blank + cols)
        self.at.append([row] * width)
        self.cols.append([self.scratch] * blank + cols)
        self.real.append(bool(tokens))


class SlotCache:
    """Key/value buffers of ``rows`` slots, allocated at the first forward, their
    columns doubled as needed; only the first ``rows`` rows are in use (``shrink``).
    ``length[r]``: row r's context length (its next token's position).

    **Shared prefixes.** A group's rows begin from the same context (GRPO's
    completions of one prompt): rather than a copy of its keys and values in
    each row, the context can be kept once, in a row of ``prefix`` (a cache of
    its own, :meth:`share`), and each of the group's rows hold only what follows
    it: row r's position p at its column p - ``offset[r]``, its prefix in row
    ``base[r]`` of ``prefix``. Attention then reads a prefix once for all the
    rows that share it (:class:`SlotPrefix`), and the rows' buffers need only as
    many columns as their longest own part."""

    def __init__(self, rows: int, capacity: int = 64, headroom: bool = True) -> None:
        self.rows = rows
        self.capacity = max(2, capacity)  # the last column is the scratch one
        self.headroom = headroom  # room to decode on (not for fixed prefixes)
        self.length = [0] * rows
        self.offset = [0] * rows  # row r's column of position p: p - offset[r]
        self.base = [-1] * rows  # its prefix's row in ``prefix`` (-1: none)
        self.prefix: SlotCache | None = None  # the shared prefixes, made by share
        self.sharing: dict[int, int] = {}  # prefix row -> the rows that share it
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self._fed: torch.Tensor | None = None  # this forward's rows (None: all)
        self._at: torch.Tensor | None = None  # (n, q): the row each query writes
        self._cols: torch.Tensor | None = None  # (n, q): the column it writes
        self._width = 0

    # -- the model's side -------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(self.length, default=0)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        """Write the fed rows' new keys and values at their columns; return the
        fed rows' keys and values up to this forward's width."""
        if layer_idx == len(self.keys):
            b, h, _, d = key_states.shape
            shape = (self.rows, h, self.capacity, d)  # rows beyond ``rows``: unused
            self.keys.append(key_states.new_zeros(shape))
            self.values.append(value_states.new_zeros(shape))
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys[self._at, :, self._cols] = key_states.transpose(1, 2)
        values[self._at, :, self._cols] = value_states.transpose(1, 2)
        keys = keys[: self.rows, :, : self._width]
        values = values[: self.rows, :, : self._width]
        if self._fed is not None:
            keys, values = (
                keys.index_select(0, self._fed),
                values.index_select(0, self._fed),
            )
        return keys, values

    # -- the engine's side ------------------------------------------------------
    def nbytes(self) -> int:
        """What the key and value buffers hold (the shared prefixes' included)."""
        held = sum(b.numel() * b.element_size() for b in (*self.keys, *self.values))
        return held + (self.prefix.nbytes() if self.prefix is not None else 0)

    def own(self, row: int) -> int:
        """Row ``row``'s filled columns (its context less a shared prefix)."""
        return self.length[row] - self.offset[row]

    def feed(
        self,
        rows: list[int] | None,
        tokens: list[list[int]],
        pad_id: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> dict[str, torch.Tensor]:
        """The model's arguments for feeding ``tokens[i]`` to row ``rows[i]`` (rows
        None: every row, ``tokens[r]`` to row r, ``[]`` for a blank row). Tokens
        are right-aligned, so each fed row's last token is the last query;
        lengths advance by what each row is fed."""
        fed = list(range(self.rows)) if rows is None else rows
        q = max(len(t) for t in tokens)
        width = max(self.own(r) + len(t) for r, t in zip(fed, tokens, strict=True))
        self._reserve(width + 1)
        queries = _Queries(pad_id, self.capacity - 1)
        for r, t in zip(fed, tokens, strict=True):
            queries.add(r, t, self.length[r], q, self.offset[r])
            self.length[r] += len(t)
        self._fed = None if rows is None else torch.tensor(rows, device=device)
        return self._arguments(queries, width, device, dtype)

    def step(
        self,
        tokens: dict[int, int],
        extend: dict[int, list[int]],
        pad_id: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> dict[str, Any]:
        """One forward of one query per row: row r's next token ``tokens[r]``, or
        the last of ``extend[r]`` (an episode rejoining with its observation: its
        other tokens follow as queries of their own that attend their row through
        :func:`slot_attention`, ``slot_groups``: row, first query, count), or a
        blank query. So the decode step and the rejoins share one forward, and
        no row of the cache is copied."""
        width = 1 + max(
            [self.own(r) for r in tokens]
            + [self.own(r) + len(t) - 1 for r, t in extend.items()]
        )
        self._reserve(width + 1)
        queries = _Queries(pad_id, self.capacity - 1)
        for r in range(self.rows):
            if r in tokens:
                queries.add(r, [tokens[r]], self.length[r], 1, self.offset[r])
            elif r in extend:
                n = len(extend[r])
                at = self.length[r] + n - 1
                queries.add(r, extend[r][-1:], at, 1, self.offset[r])
            else:
                queries.add(r, [], 0, 1)
        groups = []
        for r, toks in extend.items():
            if len(toks) > 1:
                groups.append((r, len(queries.ids), len(toks) - 1))
            for j, t in enumerate(toks[:-1]):
                queries.add(r, [t], self.length[r] + j, 1, self.offset[r])
        for r in tokens:
            self.length[r] += 1
        for r, toks in extend.items():
            self.length[r] += len(toks)
        self._fed = None
        args = self._arguments(queries, width, device, dtype)
        args["slot_groups"] = groups
        return args

    def _arguments(self, queries: _Queries, width, device, dtype):
        """Store where this forward's queries write; the model's arguments, with
        the 4-D additive mask: a real query sees its row's columns up to its own
        position, a blank one column 0 only; and ``slot_prefix`` where a fed row
        has a shared prefix."""
        ids, pos, sees, at, cols = torch.tensor(
            [queries.ids, queries.pos, queries.sees, queries.at, queries.cols],
            device=device,
        ).unbind(0)
        see = torch.arange(width, device=device) <= sees[:, :, None]  # (n, q, width)
        mask = torch.zeros(see.shape, dtype=dtype, device=device)
        mask.masked_fill_(~see, torch.finfo(dtype).min)
        self._at, self._cols, self._width = at, cols, width
        args = {"input_ids": ids, "position_ids": pos, "attention_mask": mask[:, None]}
        bases = [
            self.base[row[0]] if real else -1
            for row, real in zip(queries.at, queries.real, strict=True)
        ]
        if self.prefix is not None and max(bases, default=-1) >= 0:
            args["slot_prefix"] = SlotPrefix(self.prefix, bases, device, dtype)
        return args

    def share(self, prefix_row: int, rows: list[int]) -> None:
        """``rows`` begin from the context in row ``prefix_row`` of ``prefix``
        (already fed there): each holds none of it, only what follows."""
        n = self.prefix.length[prefix_row]
        for r in rows:
            self.clear(r)
            self.length[r] = self.offset[r] = n
            self.base[r] = prefix_row
        self.sharing[prefix_row] = self.sharing.get(prefix_row, 0) + len(rows)

    def compact_prefixes(self) -> bool:
        """The prefixes still shared move to the prefix cache's first rows (one
        prefix's keys and values copied each), so that attention reads them as a
        slice of its buffers, not gathered every forward (:class:`SlotPrefix`).
        Whether any moved."""
        live = sorted(self.sharing)
        if live == list(range(len(live))):
            return False
        for dst, src in enumerate(live):  # dst <= src: nothing live overwritten
            if src == dst:
                continue
            self.prefix.move(src, dst)
            self.sharing[dst] = self.sharing.pop(src)
            self.base = [dst if b == src else b for b in self.base]
        return True

    def copy_row(self, src: int, dst: int) -> None:
        """Row ``dst`` becomes a copy of row ``src`` (a prompt read once for a
        group's rows)."""
        self.clear(dst)
        n = self.own(src)
        for buf in (*self.keys, *self.values):
            buf[dst, :, :n] = buf[src, :, :n]
        self.length[dst], self.offset[dst] = self.length[src], self.offset[src]
        self.base[dst] = self.base[src]
        if self.base[dst] >= 0:
            self.sharing[self.base[dst]] += 1

    def clear(self, row: int) -> None:
        """Row ``row`` is free; a prefix no row shares any more is cleared too."""
        b = self.base[row]
        if b >= 0:
            self.sharing[b] -= 1
            if not self.sharing[b]:
                del self.sharing[b]
                self.prefix.clear(b)
        self.length[row] = self.offset[row] = 0
        self.base[row] = -1

    def move(self, src: int, dst: int) -> None:
        """Row ``src``'s keys and values (its filled columns) to row ``dst``."""
        n = self.own(src)
        for buf in (*self.keys, *self.values):
            buf[dst, :, :n] = buf[src, :, :n]
        for field in (self.length, self.offset, self.base):
            field[dst], field[src] = field[src], 0
        self.base[src] = -1

    def shrink(self, rows: int) -> None:
        """Use the first ``rows`` rows only (a view of the buffers: nothing is
        copied; a row left behind keeps finite values, so masked columns stay
        harmless if it is used again)."""
        self.rows = rows
        self.length = self.length[:rows]
        self.offset = self.offset[:rows]
        self.base = self.base[:rows]

    def _reserve(self, columns: int) -> None:
        """Room for ``columns`` columns plus the scratch one; buffers not made
        yet get room for as many again (a context fed whole would otherwise be
        copied into doubled buffers at its first decode step)."""
        if not self.keys:
            self.capacity = max(
                self.capacity, 2 * columns if self.headroom else columns
            )
            return
        if columns < self.capacity or (columns == self.capacity and not self.headroom):
            return  # (``columns`` counts the scratch column)
        grown = max(2 * self.capacity, columns + 1) if self.headroom else columns
        self._regrow(self.rows, grown)

    def add_rows(self, n: int) -> None:
        """``n`` more rows, free (the buffers remade where they exist)."""
        self.length += [0] * n
        self.offset += [0] * n
        self.base += [-1] * n
        if self.keys:
            self._regrow(self.rows + n, self.capacity)
        self.rows += n

    def _regrow(self, rows: int, capacity: int) -> None:
        """Buffers of ``rows`` rows and ``capacity`` columns holding the first
        rows' filled columns (rows left behind by ``shrink`` are not carried
        over), zeros elsewhere."""
        r = min(rows, self.rows)
        for bufs in (self.keys, self.values):
            for i, buf in enumerate(bufs):
                _, h, _, d = buf.shape
                new = buf.new_zeros((rows, h, capacity, d))
                new[:r, :, : self.capacity - 1] = buf[:r, :, : self.capacity - 1]
                bufs[i] = new
        self.capacity = capacity


def slot_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    dropout: float = 0.0,
    scaling: float | None = None,
    slot_groups: list[tuple[int, int, int]] | None = None,
    slot_prefix: SlotPrefix | None = None,
    layer: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Scaled dot-product attention over slot rows (transformers' attention
    interface, registered as ``ATTENTION``). Without ``slot_groups``: query row i
    attends key row i. With them (:meth:`SlotCache.step`): the first ``rows``
    queries attend their own rows, then each group's ``count`` queries, one
    token each, attend together to their row ``r`` (a view of the buffer, no
    copy), as one sequence would. With ``slot_prefix``, query rows whose row
    shares a prefix attend it too (layer ``layer``, else the module's), the two
    parts added by their log-sum-exps: the attention over the prefix and the
    row's own columns as one sequence."""
    gqa = query.shape[1] != key.shape[1]
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling

    def attend(q, k, v, m):
        if slot_prefix is not None:
            return attention_lse(q, k, v, m, scale)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=m, scale=scale, enable_gqa=gqa
        )
        return out, None

    if not slot_groups:
        out, lse = attend(query, key, value, attention_mask)
    else:
        rows = key.shape[0]
        parts = [attend(query[:rows], key, value, attention_mask[:rows])]
        for r, first, count in slot_groups:
            q = query[first : first + count].permute(2, 1, 0, 3)  # (1, H, n, D)
            m = attention_mask[first : first + count].permute(1, 2, 0, 3)
            o, s = attend(q, key[r : r + 1], value[r : r + 1], m)
            parts.append(
                (o.permute(2, 1, 0, 3), None if s is None else s.permute(2, 1, 0))
            )
        out = torch.cat([o for o, _ in parts])
        lse = None if slot_prefix is None else torch.cat([s for _, s in parts])
    if slot_prefix is not None:
        index = module.layer_idx if layer is None else layer
        shared, shared_lse = slot_prefix.attend(query, index, scale)
        top = torch.maximum(lse, shared_lse)  # the own part's is finite
        own_w, shared_w = (lse - top).exp_(), (shared_lse - top).exp_()
        out = (out * own_w[..., None] + shared * shared_w[..., None]) / (
            own_w + shared_w
        )[..., None]
        out = out.to(query.dtype)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, slot_attention)
