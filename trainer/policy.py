"""The policy: a causal LM and its tokenizer, with sampling, log-probs, entropy and values.

Wraps any Hugging Face causal LM. The default is a small Llama-style model built from a
config (no download) with the project's own word-level tokenizer; ``model.path`` loads a
local model directory instead (``local_files_only=True``, never remote code).

This module knows tensors and models; it knows nothing about environments, rewards or
algorithms. Shapes: B sequences, T tokens, V vocabulary.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from trainer.config import ModelConfig
from trainer.tokenizer import EOA, OBS, build_word_tokenizer

# (hidden, layers, heads, intermediate): tiny ~1M, small ~4M, base ~10M, large ~120M.
MODEL_SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (128, 4, 4, 512),
    "small": (256, 4, 8, 1024),
    "base": (384, 6, 8, 1536),
    "large": (768, 12, 12, 3072),
}


class PolicyError(ValueError):
    """A model that cannot be built or loaded, with a message naming ``model.*``."""


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise PolicyError(
            "model.device: 'cuda' was asked for but no CUDA device is visible"
        )
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


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
    ) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        hidden = model.config.hidden_size
        self.value_head = nn.Linear(hidden, 1) if with_value_head else None
        self.eoa_id = tokenizer.convert_tokens_to_ids(EOA)
        self.obs_id = tokenizer.convert_tokens_to_ids(OBS)
        self.pad_id = tokenizer.pad_token_id
        self.bos_id = tokenizer.bos_token_id

    # ----- construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        cfg: ModelConfig,
        vocabulary: list[str],
        *,
        with_value_head: bool = False,
        max_positions: int = 2048,
    ) -> Policy:
        """The default model from a config, or a local model directory."""
        device = resolve_device(cfg.device)
        dtype = resolve_dtype(cfg.dtype, device)
        if cfg.path:
            model, tokenizer = _load_local(cfg.path)
        else:
            tokenizer = build_word_tokenizer(vocabulary)
            hidden, layers, heads, inter = MODEL_SIZES[cfg.size]
            config = LlamaConfig(
                vocab_size=len(tokenizer),
                hidden_size=hidden,
                intermediate_size=inter,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=heads,
                max_position_embeddings=max_positions,
                tie_word_embeddings=True,
                pad_token_id=tokenizer.pad_token_id,
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            model = LlamaForCausalLM(config)
        policy = cls(model, tokenizer, with_value_head=with_value_head)
        return policy.to(device=device, dtype=dtype)

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
        return self.tokenizer.convert_ids_to_tokens(ids)

    # ----- sampling -----------------------------------------------------------------
    @torch.no_grad()
    def generate(
        self,
        contexts: list[list[int]],
        *,
        max_new_tokens: list[int] | int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """Sample continuations until the end-of-action token (kept) or the budget.

        Contexts are left-padded into one batch; a KV cache makes each new token one
        forward of length 1. ``max_new_tokens`` may differ per row (token budgets).
        """
        if not contexts:
            return []
        dev = self.device
        budgets = (
            [max_new_tokens] * len(contexts)
            if isinstance(max_new_tokens, int)
            else list(max_new_tokens)
        )
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, ctx in enumerate(contexts):
            ids[i, width - len(ctx) :] = torch.tensor(ctx, dtype=torch.long)
            mask[i, width - len(ctx) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        # Left padding: positions count real tokens only, so a row's positions do not
        # depend on how long its neighbours are.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1, :]
        next_pos = positions[:, -1:] + 1
        produced: list[list[int]] = [[] for _ in contexts]
        done = torch.tensor([b <= 0 for b in budgets], device=dev)
        limit = torch.tensor(budgets, device=dev)
        for t in range(max(budgets)):
            tok = _sample(logits, temperature, top_p, generator)
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            for i in (~done).nonzero().flatten().tolist():
                produced[i].append(int(tok[i]))
            done = done | (tok == self.eoa_id) | (limit <= t + 1)
            if bool(done.all()):
                break
            mask = torch.cat([mask, (~done).long().unsqueeze(1)], dim=1)
            out = self.model(
                input_ids=tok.unsqueeze(1),
                attention_mask=mask,
                position_ids=next_pos,
                cache=out.cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        return produced

    # ----- scoring ------------------------------------------------------------------
    def token_stats(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        with_entropy: bool = False,
        with_values: bool = False,
    ) -> TokenStats:
        """Log-probs of ``input_ids[:, 1:]`` under the model, (B, T-1); right padding.

        Entropy is the full-distribution entropy at each position (verl's
        ``entropy_from_logits``); values come from the value head on the hidden state
        that predicts each target, so ``values[:, t]`` scores the state before token t+1.
        """
        need_hidden = with_values and self.value_head is not None
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=need_hidden,
            use_cache=False,
        )
        logits = out.logits[:, :-1, :].float()
        logp_all = F.log_softmax(logits, dim=-1)
        targets = input_ids[:, 1:].unsqueeze(-1)
        logprobs = logp_all.gather(-1, targets).squeeze(-1)
        entropy = None
        if with_entropy:
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        values = None
        if need_hidden:
            hidden = out.hidden_states[-1][:, :-1, :]
            values = self.value_head(hidden).squeeze(-1).float()
        return TokenStats(logprobs=logprobs, entropy=entropy, values=values)


def _sample(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator | None
) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), nucleus-filtered."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    # Sampling on the CPU with an explicit generator keeps runs reproducible (and
    # resumable bit for bit) whatever device the model is on.
    return (
        torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(-1).to(logits.device)
    )


def _load_local(path: str) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    root = Path(path)
    if not root.is_dir():
        raise PolicyError(f"model.path: {path!r} is not a directory")
    if not (root / "config.json").is_file():
        raise PolicyError(
            f"model.path: {path!r} has no config.json (not a model directory)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            root, local_files_only=True, trust_remote_code=False
        )
        model = AutoModelForCausalLM.from_pretrained(
            root, local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # transformers raises many types; name the field
        raise PolicyError(f"model.path: could not load {path!r}: {exc}") from exc
    added = []
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or EOA
    for special in (EOA, OBS):
        if special not in tokenizer.get_vocab():
            added.append(special)
    if added:
        tokenizer.add_special_tokens({"additional_special_tokens": added})
        model.resize_token_embeddings(len(tokenizer))
    return model, tokenizer
