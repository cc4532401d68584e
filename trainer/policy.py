"""The policy: a causal LM and its tokenizer, with sampling, log-probs, entropy and values.

Wraps any Hugging Face causal LM (built by ``trainer.models``: the default small
Llama-style model, a local model directory, LoRA adapters).

This module knows tensors and models; it knows nothing about environments, rewards or
algorithms. Shapes: B sequences, T tokens, V vocabulary.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, PreTrainedTokenizerBase

from trainer.chat import make_renderer
from trainer.config import ModelConfig
from trainer.head import head_stats, split_model
from trainer.models import (
    build_model,
    generation_eos,
    resolve_device,
    resolve_dtype,
)
from trainer.rows import Prefixes, select_rows, shares_prefix, take_rows
from trainer.token_text import TokenTexts, TokenView


@dataclass
class TokenStats:
    """Per-token quantities for targets ``input_ids[:, 1:]``; all (B, T-1)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    values: torch.Tensor | None


class Policy(nn.Module):
    """A causal LM plus (optionally) a scalar value head on its last hidden state."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        *,
        with_value_head: bool = False,
        temperature: float = 1.0,
        fused_head: bool = True,
    ) -> None:
        super().__init__()
        self.model = model
        # The distribution the policy samples from is softmax(logits / temperature);
        # log-probs, ratios, KL and entropy are all taken of that same distribution,
        # or a run at T != 1 would train on ratios of a policy it never sampled from.
        self.temperature = float(temperature)
        self.lora = False  # set by build: only LoRA adapters are trained
        # Log-probs and entropy from the final hidden states a chunk of tokens at a
        # time (trainer.head) where the model allows it (checked here, before any
        # update compiles its layers, once); False: from its logits.
        self.fused_head = fused_head
        if fused_head:
            split_model(model)
        self.tokenizer = tokenizer
        hidden = model.config.hidden_size
        self.value_head = nn.Linear(hidden, 1) if with_value_head else None
        self.renderer = make_renderer(tokenizer, generation_eos(model))
        # eoa_id: the token that ends an action (<eoa>, or the chat template's
        # end-of-turn token); generation stops at any of ``stop_ids``.
        self.eoa_id = self.renderer.end_id
        self.obs_id = self.renderer.obs_id
        self.stop_ids = self.renderer.stop_ids
        self.pad_id = tokenizer.pad_token_id
        self.bos_id = tokenizer.bos_token_id
        # Asked between generated tokens (``trainer.stopping``): True raises Stopped.
        # Set by ``trainer.loop.train`` for a run of one process.
        self.stop_check: Callable[[], bool] | None = None
        # id -> token string, looked up per token when events are recorded.
        self._token_table: list[str] = tokenizer.convert_ids_to_tokens(
            list(range(len(tokenizer)))
        )
        self._token_texts: TokenTexts | None = None  # built on the first record
        self._engine: Any = None  # built on the first generate

    # ----- construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        cfg: ModelConfig,
        vocabulary: list[str],
        *,
        with_value_head: bool = False,
        max_positions: int = 2048,
        temperature: float = 1.0,
        fused_head: bool = True,
    ) -> Policy:
        """The default model from a config, or a local model directory."""
        device = resolve_device(cfg.device)
        dtype = resolve_dtype(cfg.dtype, device)
        model, tokenizer = build_model(cfg, vocabulary, max_positions=max_positions)
        policy = cls(
            model,
            tokenizer,
            with_value_head=with_value_head,
            temperature=temperature,
            fused_head=fused_head,
        )
        policy.lora = cfg.lora is not None
        return policy.to(device=device, dtype=dtype)

    def adapters_off(self) -> AdaptersOff:
        """The KL reference of a LoRA policy: this model with its adapters disabled
        (the frozen base), so no second copy of the weights is kept."""
        return AdaptersOff(self)

    def frozen_copy(self) -> Policy:
        """A reference policy for the KL term: same weights, no gradients."""
        ref = copy.deepcopy(self)
        ref.requires_grad_(False)
        ref.eval()
        return ref

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    # ----- text <-> ids -------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def tokens(self, ids: list[int]) -> list[str]:
        table, n = self._token_table, len(self._token_table)
        if all(0 <= i < n for i in ids):
            return [table[i] for i in ids]
        return self.tokenizer.convert_ids_to_tokens(ids)

    def token_view(self, ids: list[int]) -> TokenView:
        """The tokens as a trajectory page shows them: raw pieces and the text each
        adds (no ``Ġ``), special tokens and where chat turns open."""
        if self._token_texts is None:
            self._token_texts = TokenTexts(self.tokenizer)
        return self._token_texts.view(ids, self.tokens(ids))

    def decode_many(self, seqs: list[list[int]]) -> list[str]:
        """Each sequence decoded with its special tokens kept, in one call where the
        tokenizer allows it (a fast tokenizer with no clean-up pass)."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None and not self.tokenizer.clean_up_tokenization_spaces:
            return backend.decode_batch(seqs, skip_special_tokens=False)
        return [self.tokenizer.decode(s) for s in seqs]

    # ----- sampling -----------------------------------------------------------------
    @property
    def engine(self) -> Any:  # a trainer.engines.RolloutEngine
        """The rollout engine that samples from this policy (``eager`` unless
        :meth:`use_engine` chose another)."""
        if self._engine is None:
            self.use_engine("eager")
        return self._engine

    def use_engine(self, name: str) -> Any:  # a trainer.engines.RolloutEngine
        """Sample through the engine registered as ``name`` (``rollout.engine``)."""
        from trainer.engines import build_engine

        self._engine = build_engine(name, self)
        return self._engine

    def generate(
        self,
        contexts: list[list[int]],
        *,
        max_new_tokens: list[int] | int,
        temperature: float | None = None,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        logprobs_out: list[list[float]] | None = None,
    ) -> list[list[int]]:
        """Sample continuations until a stop token (kept) or the budget, through the
        policy's engine (:mod:`trainer.engines`).

        ``max_new_tokens`` may differ per row (token budgets). ``logprobs_out``, if
        given, receives one list per row: the sampler's log-prob of each produced
        token at the policy's temperature (the quantity the learner computes, so the
        two can be compared token for token).
        Raises :class:`~trainer.stopping.Stopped` when ``stop_check`` says so.
        """
        if not contexts:
            return []
        budgets = (
            [max_new_tokens] * len(contexts)
            if isinstance(max_new_tokens, int)
            else list(max_new_tokens)
        )
        engine = self.engine
        if engine.asleep:  # evaluation or a what-if between two rollouts
            engine.wake()
        gen = engine.generate(
            contexts,
            budgets,
            temperature=self.temperature if temperature is None else temperature,
            top_p=top_p,
            generator=generator,
            with_logprobs=logprobs_out is not None,
        )
        if logprobs_out is not None:
            logprobs_out[:] = gen.logprobs
        return gen.tokens

    # ----- scoring ------------------------------------------------------------------
    def token_stats(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        with_entropy: bool = False,
        with_values: bool = False,
        start: int = 0,
        entropy_grad: bool = False,
        prefixes: Prefixes | None = None,
    ) -> TokenStats:
        """Log-probs of ``input_ids[:, 1:]`` under the sampling distribution
        ``softmax(logits / self.temperature)``, (B, T-1); right padding.

        Only targets a loss can use are scored: from index ``start`` on, or with
        ``prefixes`` from each row's last prompt token on (the language-model head
        and the softmax run on those positions alone, as TRL's ``logits_to_keep``
        does); the entries before are 0. With ``prefixes``, each distinct prompt goes
        through the model once and its keys and values are shared by every row that
        starts with it (gradients flow back through them), so a group of G rollouts
        pays for its prompt once instead of G times. Log-probs are ``logit[target] -
        logsumexp(logits)``, with no (B, T, V) log-softmax kept. Entropy is the
        full-distribution entropy at each position (verl's ``entropy_from_logits``),
        without a gradient unless ``entropy_grad``; values come from the value head
        on the hidden state that predicts each target, so ``values[:, t]`` scores the
        state before token t+1.
        """
        need_hidden = with_values and self.value_head is not None
        if prefixes is not None:
            shared = self._shared_prefix_forward(
                input_ids, attention_mask, prefixes, need_hidden
            )
            if shared is not None:
                feats, targets, hidden, place, split = shared
                return self._stats(
                    feats, targets, hidden, place, with_entropy, entropy_grad, split
                )
        full = input_ids.shape[1]
        start = max(0, min(int(start), full - 1))
        # Columns past every row's end (rows picked from a wider batch) are left
        # out of the forward: causal attention, so no other position changes.
        T = min(full, max(int(attention_mask.sum(1).max()), start + 2))
        input_ids, attention_mask = input_ids[:, :T], attention_mask[:, :T]
        split = self._head()
        feats, hidden, _ = self._forward(
            split,
            need_hidden,
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            logits_to_keep=T - start,  # positions start .. T-1
        )
        if hidden is not None:
            hidden = hidden[:, start:-1, :]

        def place(x: torch.Tensor) -> torch.Tensor:
            return F.pad(x, (start, full - T)) if start or full > T else x

        return self._stats(
            feats[:, -(T - start) : -1, :],  # positions start .. T-2
            input_ids[:, start + 1 :],
            hidden,
            place,
            with_entropy,
            entropy_grad,
            split,
        )

    def _head(self) -> tuple[nn.Module, nn.Linear] | None:
        """(decoder, head) when log-probs are taken from hidden states in chunks."""
        return split_model(self.model) if self.fused_head else None

    def _forward(self, split, need_hidden: bool, **kwargs):
        """The model over ``kwargs``: (what the head reads, the last hidden states
        or None, the output). With ``split`` (:meth:`_head`) what the head reads is
        the decoder's last hidden states, at every position; else the logits, at
        the last ``logits_to_keep`` positions."""
        if split is not None:
            kwargs.pop("logits_to_keep", None)
            out = split[0](**kwargs)
            h = out.last_hidden_state
            return h, (h if need_hidden else None), out
        out = self.model(**kwargs, output_hidden_states=need_hidden)
        return out.logits, (out.hidden_states[-1] if need_hidden else None), out

    def _stats(
        self,
        feats: torch.Tensor,
        targets: torch.Tensor,
        hidden: torch.Tensor | None,
        place: Callable[[torch.Tensor], torch.Tensor],
        with_entropy: bool,
        entropy_grad: bool,
        split: tuple[nn.Module, nn.Linear] | None = None,
    ) -> TokenStats:
        """Per-position numbers from (B, K, V) logits predicting (B, K) targets, or
        with ``split`` from (B, K, H) hidden states through its head in chunks;
        ``place`` puts a (B, K) result where it belongs in the (B, T-1) layout."""
        values = None
        if hidden is not None:
            values = place(self.value_head(hidden).squeeze(-1).float())
        if split is not None:
            head = split[1]
            lp, ent = head_stats(
                feats,
                head.weight,
                head.bias,
                targets,
                temperature=self.temperature,
                entropy=with_entropy,
                entropy_grad=entropy_grad,
            )
            entropy = place(ent) if ent is not None else None
            return TokenStats(logprobs=place(lp), entropy=entropy, values=values)
        logits = feats.float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        lse = torch.logsumexp(logits, dim=-1)
        logprobs = place(logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse)
        entropy = None
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                z = logits if entropy_grad else logits.detach()
                ent = lse if entropy_grad else lse.detach()
                entropy = place(ent - (torch.softmax(z, -1) * z).sum(-1))
        return TokenStats(logprobs=logprobs, entropy=entropy, values=values)

    def _shared_prefix_forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        prefixes: Prefixes,
        need_hidden: bool,
    ):
        """One forward of the distinct prompts, their KV cache gathered per row, then
        one forward of every row's remainder on top of it. Returns logits (B, S, V)
        where position j predicts remainder token j, those targets, the matching
        hidden states (or None) and the function that places (B, S) results at target
        index ``length - 1 + j`` of the (B, T-1) layout; None when no prompt is
        shared or a row has nothing after its prompt."""
        B, T = input_ids.shape
        if not shares_prefix(attention_mask, prefixes):
            return None
        used, inv = torch.unique(prefixes.of_row, return_inverse=True)
        plen = prefixes.length
        rest = attention_mask.sum(1) - plen
        p_ids, p_mask = prefixes.ids[used], prefixes.mask[used]
        lead = p_ids.shape[1] - int(p_mask.sum(1).max())  # padding common to all
        p_ids, p_mask = p_ids[:, lead:], p_mask[:, lead:]
        split = self._head()
        feats_p, hidden_p, out_p = self._forward(
            split,
            need_hidden,
            input_ids=p_ids,
            attention_mask=p_mask,
            position_ids=(p_mask.cumsum(-1) - 1).clamp(min=0),
            cache=DynamicCache(),
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out_p.cache
        select_rows(cache, inv)  # differentiable: rows share the prompt's K/V
        S = int(rest.max())
        cols = torch.arange(S, device=input_ids.device)
        src = plen.unsqueeze(1) + cols  # (B, S) index of remainder token j in the row
        live = cols < rest.unsqueeze(1)
        s_ids = torch.where(
            live, input_ids.gather(1, src.clamp(max=T - 1)), self.pad_id
        )
        feats_s, hidden_s, _ = self._forward(
            split,
            need_hidden,
            input_ids=s_ids,
            attention_mask=torch.cat([p_mask[inv], live.long()], dim=1),
            position_ids=src,
            cache=cache,
            use_cache=True,
        )

        # The prompt's last position predicts remainder token 0; remainder position
        # j-1 predicts token j.
        def join(p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            return torch.cat([take_rows(p[:, -1:, :], inv), s[:, :-1, :]], 1)

        feats = join(feats_p, feats_s)
        hidden = join(hidden_p, hidden_s) if need_hidden else None
        j = torch.arange(T - 1, device=input_ids.device) - (plen.unsqueeze(1) - 1)
        inside = (j >= 0) & (j < S)
        j = j.clamp(0, S - 1)

        def place(x: torch.Tensor) -> torch.Tensor:
            return torch.where(inside, x.gather(1, j), x.new_zeros(()))

        return feats, s_ids, hidden, place, split


class AdaptersOff:
    """A policy's base model seen through its LoRA wrapper with the adapters off;
    scores like :meth:`Policy.token_stats` (same temperature)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def token_stats(self, *args, **kwargs) -> TokenStats:
        with self.policy.model.disable_adapter():
            return self.policy.token_stats(*args, **kwargs)
