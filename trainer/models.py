"""Building the model and tokenizer a policy wraps.

The default is a small Llama-style model built from a config (no download) with the
project's own word-level tokenizer; ``model.path`` loads a local model directory
instead (``local_files_only=True``, never remote code); ``model.lora`` wraps either
with ``peft`` adapters.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from trainer.config import ModelConfig
from trainer.tokenizer import EOA, OBS, build_word_tokenizer

# (hidden, layers, heads, intermediate): tiny ~1M, small ~4M, base ~10M, large ~120M,
# 0.5b ~0.5B parameters (Qwen2.5-0.5B's depth and width class; for GPUs).
MODEL_SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (128, 4, 4, 512),
    "small": (256, 4, 8, 1024),
    "base": (384, 6, 8, 1536),
    "large": (768, 12, 12, 3072),
    "0.5b": (1024, 24, 16, 5504),
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


def build_model(
    cfg: ModelConfig, vocabulary: list[str], *, max_positions: int = 2048
) -> tuple[nn.Module, PreTrainedTokenizerBase]:
    """The model ``cfg`` names (with its LoRA adapters) and its tokenizer;
    ``vocabulary``: the words of the default tokenizer (ignored with ``path``)."""
    if cfg.path:
        model, tokenizer = load_local(cfg.path)
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
            # PyTorch's fused scaled-dot-product attention (flash or memory-efficient
            # kernels on CUDA); a local model directory gets it too where its
            # architecture supports it (transformers' default).
            attn_implementation="sdpa",
        )
        model = LlamaForCausalLM(config)
    if cfg.lora is not None:
        model = _with_lora(model, cfg)
    return model, tokenizer


def _with_lora(model: nn.Module, cfg: ModelConfig) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:  # pinned in requirements.txt
        raise PolicyError("model.lora: the peft package is not installed") from exc
    lora = cfg.lora
    try:
        return get_peft_model(
            model,
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
    except ValueError as exc:  # e.g. a target module the model does not have
        raise PolicyError(f"model.lora.target_modules: {exc}") from exc


def generation_eos(model: nn.Module) -> list[int]:
    """The model's own end-of-sequence ids (``generation_config.json``), if any."""
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]


def load_local(path: str) -> tuple[nn.Module, PreTrainedTokenizerBase]:
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
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or EOA
    if tokenizer.chat_template:  # turns and their ends come from the template
        return model, tokenizer
    added = []
    for special in (EOA, OBS):
        if special not in tokenizer.get_vocab():
            added.append(special)
    if added:
        tokenizer.add_special_tokens({"additional_special_tokens": added})
        model.resize_token_embeddings(len(tokenizer))
    return model, tokenizer
