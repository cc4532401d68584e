"""Llama-family forwards as plain tensor calls, for the rollout engines' decoding.

On a CPU a small model's decode step costs the framework's per-module and per-call
overhead more than its arithmetic: transformers' ``LlamaForCausalLM`` takes ~2.3
ms a slot-row decode forward at one row of the default ``small`` model on 2 cores
and ~5.1 ms at 15 rows; :class:`LeanForward`, the same arithmetic as tensor calls,
~1.2 and ~2.6 ms (``bench/rollout_bench.py``'s ``dataset`` shape is ~100 such
forwards a rollout; with the packed products below, ~2.1 and ~3.3 ms on another
2-core machine where the model's took longer). It computes what the model's
forward computes, over :class:`~trainer.engines.slots.SlotCache` rows (the
continuous engine, ``__call__``) or over a transformers cache with a 2-D padding
mask and transformers' own causal mask and ``sdpa`` attention (the eager engine's
decode steps, :meth:`LeanForward.over_cache`): on the CPU, the query, key and value
projections in one matrix product and the gate and up projections in another
(their weights concatenated, remade when the optimiser changes them; on an
accelerator, or past :data:`COPY_LIMIT`, each projection is its own product, so no
weight is held twice), a product of :data:`~trainer.engines.lean_products.PACK_MIN`
weights or more through oneDNN from a packed copy of its weight (CPU, float32;
:mod:`trainer.engines.lean_products`), one rotation for the query and key heads
with the rotary tables indexed by position, the norms through
``torch.nn.functional.rms_norm`` in float32 (transformers' steps in other dtypes),
and the final norm and the head on each row's last position only. Its logits are
the model's to float32 rounding (~1e-6 here: a matrix product rounds by its shape
and its library, and the model's head runs over every position it is given, this
one's over each row's last), so an engine samples the same tokens through it and
records log-probs that agree to that rounding, as the eager engine's agree with the
reference loop's. The head is called as the module it is, so its hooks (a logit
bias, as the bench and tests set) apply; a projection that is not a plain
``nn.Linear`` (LoRA's) is called as its module.

It is used only where it is known to give the model's logits:

* a family whose decoder layer it writes (:data:`~trainer.engines.lean_fit.FAMILIES`:
  Llama, Mistral without sliding windows, Qwen2, Qwen3), SiLU MLPs, RMS norms
  (:mod:`trainer.engines.lean_fit`);
* no hook on any module but the head (a hook elsewhere, FSDP's among them, would be
  skipped), no attention dropout in training mode: checked at every generation;
* its first forwards on a model agree with the model's own (:meth:`LeanForward.
  agrees`): a slot-row prefill and a decode step with a rejoining row, and, for
  ``over_cache`` (``cache_ok``), a decode step over a left-padded prefill's cache.

Otherwise the model's forward runs, as before, and :func:`lean_forward` says why.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from trainer.engines.lean_fit import base_model, hooked, unsupported
from trainer.engines.lean_products import can_pack, fused, project
from trainer.engines.prefill import reserve
from trainer.engines.slots import SlotCache, SlotPrefix, slot_attention

log = logging.getLogger(__name__)

# Rotary variants whose frequencies do not depend on the forward's length: their
# cos/sin are a table indexed by position (others are computed each forward).
STATIC_ROPE = ("default", "linear", "llama3", "yarn")

# The most the concatenated q/k/v and gate/up weights may hold a second time: about
# a 100M-parameter model's (the small models whose forwards the per-call overhead
# rules); a bigger one's projections are each its own product.
COPY_LIMIT = 256 * 2**20

_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lean_forward(model: nn.Module) -> tuple[LeanForward | None, str]:
    """The lean forward of ``model`` for this rollout, or None and why not. Built
    (and checked against the model) once per model, its weights refreshed when the
    optimiser has changed them."""
    where = hooked(model)
    if where:
        return None, f"a hook on {where} (the model's forward runs it)"
    config = getattr(base_model(model), "config", None)
    if model.training and getattr(config, "attention_dropout", 0.0):
        return None, "attention dropout in training mode"
    lean = _BUILT.get(model)
    if lean is None:
        reason = unsupported(model)
        if reason is None:
            lean = LeanForward(model)
            reason = None if lean.agrees() else "its logits differ from the model's"
        if reason is not None:
            lean = _Unsupported(reason)
        _BUILT[model] = lean
    if isinstance(lean, _Unsupported):
        return None, lean.reason
    lean.refresh()
    return lean, ""


class _Unsupported:
    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Layer:
    """One decoder layer's parts: fused projections where plain, else modules."""

    def __init__(self, layer: nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.norm1, self.norm2 = layer.input_layernorm, layer.post_attention_layernorm
        self.attn = attn  # transformers' attention functions read its settings
        self.q_norm = getattr(attn, "q_norm", None)
        self.k_norm = getattr(attn, "k_norm", None)
        self.qkv_mods = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.gate_up_mods = (mlp.gate_proj, mlp.up_proj)
        self.o_mods, self.down_mods = (attn.o_proj,), (mlp.down_proj,)
        self.scaling = attn.scaling
        self.head_dim = attn.head_dim
        self.kv_heads = attn.k_proj.out_features // attn.head_dim
        self.qkv = self.gate_up = self.o = self.down = None  # see refresh

    def refresh(self, concatenate: bool, pack: bool) -> None:
        self.qkv = fused(self.qkv_mods, concatenate, pack)
        self.gate_up = fused(self.gate_up_mods, concatenate, pack)
        # One module: its own weight, or a packed copy of it.
        self.o = fused(self.o_mods, concatenate, pack)
        self.down = fused(self.down_mods, concatenate, pack)

    def copied_bytes(self) -> int:
        """What the copies of its projections' weights hold at most (packed, all
        four; concatenated, the q/k/v and gate/up)."""
        mods = self.qkv_mods + self.gate_up_mods + self.o_mods + self.down_mods
        return sum(m.weight.numel() * m.weight.element_size() for m in mods)


def _rms(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMS norm: in float32, the weight times the result cast back."""
    eps = norm.variance_epsilon
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, eps)
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return norm.weight * h.to(x.dtype)


def _close(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    """Logits the same to float rounding (relative to the largest)."""
    for a, b in zip(got, want, strict=True):
        scale = float(b.abs().max()) or 1.0
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-4 * scale):
            return False
    return True


def _rotate(x: torch.Tensor, cos: torch.Tensor, signed: torch.Tensor) -> torch.Tensor:
    """transformers' rotation, ``x * cos + rotate_half(x) * sin``, with the sign
    of ``rotate_half`` in ``signed`` (:func:`_signed`): the same numbers, in two
    fewer tensor calls."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed


def _signed(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` with its first half negated (negation is exact)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


class LeanForward:
    """The decoder of a Llama-family ``model`` as tensor calls: the logits of each
    row's last position, over slot rows (``__call__``) or a transformers cache
    (``over_cache``); see the module's docstring."""

    def __init__(self, model: nn.Module) -> None:
        # Weakly: _BUILT's entry for the model (a weak key) must not keep it alive.
        self._model = weakref.ref(model)
        base = base_model(model)
        decoder = base.model
        self.embed = decoder.embed_tokens
        self.norm = decoder.norm
        self.rotary = decoder.rotary_emb
        self.config = base.config
        self.head = base.get_output_embeddings()
        self.layers = [_Layer(layer) for layer in decoder.layers]
        # Concatenated weights on the CPU, for a model whose copies stay small; on
        # an accelerator its memory is the update's.
        self.concatenate = self.embed.weight.device.type == "cpu" and (
            sum(layer.copied_bytes() for layer in self.layers) <= COPY_LIMIT
        )
        self.pack = self.concatenate and can_pack(self.embed.weight)
        self.static_rope = getattr(self.rotary, "rope_type", "default") in STATIC_ROPE
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None
        self._versions: tuple[int, ...] | None = None
        self.cache_ok = False  # over_cache gives the model's logits (see agrees)

    def refresh(self) -> None:
        """Remake the concatenated weights if the optimiser (or anyone) changed a
        weight in place since they were made, or replaced it."""
        params = [
            p
            for layer in self.layers
            for m in layer.qkv_mods
            + layer.gate_up_mods
            + layer.o_mods
            + layer.down_mods
            for p in m.parameters(recurse=False)
        ]
        versions = tuple(v for p in params for v in (p._version, p.data_ptr()))
        if versions != self._versions:
            for layer in self.layers:
                layer.refresh(self.concatenate, self.pack)
            self._versions = versions

    def _rope(self, x: torch.Tensor, pos: torch.Tensor, columns: int):
        """cos and sin (signed, see :func:`_rotate`) for ``pos`` (n, q), shaped
        (n, 1, q, head_dim)."""
        if not self.static_rope:
            cos, sin = self.rotary(x, pos)
            return cos.unsqueeze(1), _signed(sin).unsqueeze(1)
        table = self._table
        if (
            table is None
            or table[0].shape[0] < columns
            or (table[0].device, table[0].dtype) != (x.device, x.dtype)
        ):
            size = max(columns, 2 * (0 if table is None else table[0].shape[0]), 256)
            every = torch.arange(size, device=x.device)[None]
            cos, sin = self.rotary(x, every)
            self._table = (cos[0], _signed(sin[0]))
        cos, sin = self._table
        return cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)

    def _qkv(self, layer: _Layer, h: torch.Tensor, cos, sin):
        """Queries, keys (rotated) and values, (n, heads, q, head_dim) each, laid
        out as transformers lays them."""
        n, q, _ = h.shape
        if layer.qkv is not None and layer.q_norm is None:
            # One product, and one rotation for the query and key heads together.
            y = layer.qkv(h).view(n, q, -1, layer.head_dim).transpose(1, 2)
            heads = layer.qkv_mods[0].out_features // layer.head_dim
            qk = _rotate(y[:, : heads + layer.kv_heads], cos, sin)
            return qk[:, :heads], qk[:, heads:], y[:, heads + layer.kv_heads :]
        shape = (n, q, -1, layer.head_dim)
        qs, ks, vs = (t.view(shape) for t in project(h, layer.qkv, layer.qkv_mods))
        if layer.q_norm is not None:
            qs, ks = _rms(layer.q_norm, qs), _rms(layer.k_norm, ks)
        qs, ks, vs = qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2)
        return _rotate(qs, cos, sin), _rotate(ks, cos, sin), vs

    @torch.no_grad()
    def __call__(
        self,
        cache: SlotCache,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        slot_groups: list | None = None,
        slot_prefix: SlotPrefix | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Slot rows: (r, V) logits of the last query of query rows ``rows``
        (None: all)."""

        def attend(i: int, layer: _Layer, q, k, v) -> torch.Tensor:
            keys, values = cache.update(k, v, i)
            return slot_attention(
                None,
                q,
                keys,
                values,
                attention_mask,
                scaling=layer.scaling,
                slot_groups=slot_groups,
                slot_prefix=slot_prefix,
                layer=i,
            )[0]

        x = F.embedding(input_ids, self.embed.weight)
        # Positions run past the buffers' columns where rows share a prefix.
        positions = cache.get_seq_length() + 1
        return self._layers(x, position_ids, positions, attend, rows)

    @torch.no_grad()
    def over_cache(
        self,
        cache: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """The model's forward over a transformers ``Cache`` and a 2-D padding mask
        (the eager engine's decode steps; a left-padded prefill gives the
        model's logits too): (B, V) logits of each row's last position. The mask and the
        attention are transformers' own (the model's ``sdpa``), so only the
        module stack is left out."""
        x = F.embedding(input_ids, self.embed.weight)
        if input_ids.shape[1] == 1:
            # One query a row sees every key but padding: the padding mask is the
            # whole mask. transformers' would first ask whether the mask has any
            # padding at all (a read of the device, a host sync every token on a GPU).
            mask = attention_mask.bool()[:, None, None, :]
        else:
            mask = create_causal_mask(
                config=self.config,
                inputs_embeds=x,
                attention_mask=attention_mask,
                cache=cache,
                position_ids=position_ids,
            )
        attention = ALL_ATTENTION_FUNCTIONS["sdpa"]

        def attend(i: int, layer: _Layer, q, k, v) -> torch.Tensor:
            keys, values = cache.update(k, v, i)
            return attention(
                layer.attn, q, keys, values, mask, dropout=0.0, scaling=layer.scaling
            )[0]

        columns = cache.get_seq_length() + input_ids.shape[1]
        return self._layers(x, position_ids, columns, attend, None)

    def _layers(self, x, position_ids, columns: int, attend, rows) -> torch.Tensor:
        """The decoder layers over embeddings ``x`` (n, q, hidden), ``attend``
        writing each layer's keys and values and attending (queries, keys and
        values (n, heads, q, head_dim); out (n, q, heads, head_dim)); the head
        on the last position of rows ``rows``."""
        n, q = x.shape[:2]
        cos, sin = self._rope(x, position_ids, columns)
        for i, layer in enumerate(self.layers):
            qs, ks, vs = self._qkv(layer, _rms(layer.norm1, x), cos, sin)
            out = attend(i, layer, qs, ks, vs)
            # In place: x and the MLP's activations are this forward's own.
            x += project(out.reshape(n, q, -1), layer.o, layer.o_mods)[0]
            h = _rms(layer.norm2, x)
            gate, up = project(h, layer.gate_up, layer.gate_up_mods)
            x += project(F.silu(gate).mul_(up), layer.down, layer.down_mods)[0]
        last = x[:, -1:]
        if rows is not None:
            last = last.index_select(0, rows)
        return self.head(_rms(self.norm, last))[:, -1]

    @torch.no_grad()
    def agrees(self) -> bool:
        """Whether this forward gives the model's logits on a slot-row prefill of
        two rows, then a decode step in which one row decodes and the other
        rejoins with two tokens (a group), as a rollout's forwards are; and
        (``over_cache``) on a decode step over a left-padded prefill's cache,
        as the eager engine's are (only with the model's ``sdpa`` attention)."""
        device = self.embed.weight.device
        dtype = self.embed.weight.dtype
        g = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, self.config.vocab_size, (9,), generator=g).tolist()
        self.refresh()
        got, want = [], []
        for run, out in ((self._run_model, want), (self._run_lean, got)):
            cache = SlotCache(2, capacity=8)
            args = cache.feed(None, [prompt[:5], prompt[5:7]], 0, device, dtype)
            out.append(run(cache, args, None))
            args = cache.step({0: prompt[7]}, {1: prompt[7:9]}, 0, device, dtype)
            out.append(run(cache, args, torch.tensor([0, 1], device=device)))
        if not _close(got, want):
            log.info("lean forward: its logits differ from the model's; not used")
            return False
        self.cache_ok = self.config._attn_implementation == "sdpa" and _close(
            *(self._decode_once(prompt, lean) for lean in (True, False))
        )
        return True

    def _decode_once(self, prompt: list[int], lean: bool) -> list[torch.Tensor]:
        """A prefill of two left-padded rows by the model, then a decode step over
        its cache (room reserved, as the eager engine's) by this forward or the
        model's: its logits."""
        device = self.embed.weight.device
        ids = torch.tensor([prompt[:5], [0, 0] + prompt[5:8]], device=device)
        mask = torch.tensor([[1] * 5, [0, 0, 1, 1, 1]], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        tok = torch.tensor([[prompt[8]], [prompt[0]]], device=device)
        cache = DynamicCache()
        self._model_logits(cache, ids, mask, positions)
        reserve(cache, 4)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
        if lean:
            return [self.over_cache(cache, tok, mask, positions)]
        return [self._model_logits(cache, tok, mask, positions)]

    def _model_logits(self, cache, ids, mask, positions) -> torch.Tensor:
        out = self._model()(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def _run_model(self, cache, args, rows):
        from trainer.engines.slots import ATTENTION

        model = self._model()
        config = model.config
        kept = config._attn_implementation
        config._attn_implementation = ATTENTION
        try:
            out = model(**args, cache=cache, use_cache=True)
        finally:
            config._attn_implementation = kept
        logits = out.logits[:, -1, :]
        return logits if rows is None else logits.index_select(0, rows)

    def _run_lean(self, cache, args, rows):
        return self(cache, **args, rows=rows)
