"""Whether a model fits :mod:`trainer.engines.lean`'s forward: its family and
norms (once per model), and the hooks on its modules (every generation: a hook
the lean forward would skip hands the forward back to the model).
"""

from __future__ import annotations

from torch import nn

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
# Where transformers' output-capturing hooks live (see hooked).
_CAPTURING = "transformers.utils.output_capturing"


def base_model(model: nn.Module) -> nn.Module:
    """The causal LM under peft's wrappers (LoRA layers are in it, in place)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def unsupported(model: nn.Module) -> str | None:
    base = base_model(model)
    config = getattr(base, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        return f"model type {kind!r} is not one of {', '.join(FAMILIES)}"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {config.hidden_act!r} (SiLU MLPs only)"
    decoder = getattr(base, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None or not hasattr(decoder, "rotary_emb"):
        return "no decoder layers or rotary embedding where Llama keeps them"
    if type(decoder.embed_tokens) is not nn.Embedding:
        return f"its embedding is a {type(decoder.embed_tokens).__name__}"
    norms = [decoder.norm]
    for layer in layers:
        norms += [layer.input_layernorm, layer.post_attention_layernorm]
        attn = layer.self_attn
        norms += [getattr(attn, n) for n in ("q_norm", "k_norm") if hasattr(attn, n)]
    for norm in norms:
        if not type(norm).__name__.endswith("RMSNorm"):
            return f"a {type(norm).__name__} where an RMS norm goes"
    return None


def hooked(model: nn.Module) -> str | None:
    """The first module (but the head) with a forward hook that does something
    here, or None. transformers' output-capturing hooks (installed on the layers
    the first time hidden states are asked for, as the value head asks) record
    nothing unless a forward asks them to, so they are not counted."""
    from torch.nn.modules import module as mod

    head = getattr(base_model(model), "get_output_embeddings", lambda: None)()
    if mod._global_forward_hooks or mod._global_forward_pre_hooks:
        return "every module (a global hook)"
    for name, m in model.named_modules():
        if m is head:
            continue
        hooks = [*m._forward_hooks.values(), *m._forward_pre_hooks.values()]
        if any(getattr(h, "__module__", None) != _CAPTURING for h in hooks):
            return name or "the model"
    return None
