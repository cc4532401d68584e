"""The language-model head's log-probs and entropy a chunk of tokens at a time.

A training forward that takes log-probs from the model's logits holds (tokens,
vocabulary) float32 tensors: the logits upcast, the softmax behind ``logsumexp``
kept for the backward, the entropy's softmax and products. With a modern
vocabulary (Qwen's 151,936 entries) that is ~0.6 MB a token for each, several
times the decoder layers' activations: most of an update's memory, and on a GPU
elementwise passes over it that move more bytes than the matrix products do.

:func:`head_stats` takes the final hidden states instead and runs the head, the
log-softmax and the entropy over ``CHUNK_BYTES`` of float32 logits at a time,
keeping only per-token numbers (the log-sum-exp, the entropy); the backward
computes each chunk's logits again and turns the gradients of the log-probs (and
of the entropy, when it has one) into the head's weight and input gradients
(Liger's fused linear cross-entropy and verl's fused kernels do the same for
their losses). The arithmetic is the same as the unfused path's (float32 logits
over the head's product in the model's dtype, divided by the temperature), so
the numbers agree to rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainer.budget import HEAD_CHUNK_BYTES, head_chunk_tokens, head_transformed

# Float32 logits one chunk holds (``trainer.budget`` counts it): the forward and
# the backward each keep a few tensors of this size at a time, whatever the batch.
CHUNK_BYTES = HEAD_CHUNK_BYTES


def _logits(h, weight, bias, temperature: float) -> torch.Tensor:
    z = F.linear(h, weight, bias).float()
    return z / temperature if temperature != 1.0 else z


def _grad_logits(z, lse, targets, g, temperature: float, entropy=None):
    """A chunk's gradient with respect to its logits (before the temperature),
    float32, from its tempered logits ``z``, their log-sum-exp, the (n, 1)
    targets and the log-probs' (n, 1) gradient ``g``: g (onehot - p) / T; with
    ``entropy`` = (H, its gradient), plus that gradient times dH/dz = -p (log p + H)."""
    logp = z - lse.unsqueeze(-1)
    p = logp.exp()
    gz = p * -g
    gz.scatter_add_(-1, targets, g)
    if entropy is not None:
        ent, g_ent = entropy
        gz -= p * (logp + ent.unsqueeze(-1)) * g_ent.unsqueeze(-1)
    if temperature != 1.0:
        gz /= temperature
    return gz


class _HeadStats(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, hidden, weight, bias, targets, temperature, entropy, grad_ent, frozen
    ):
        n = hidden.shape[0]
        size = head_chunk_tokens(weight.shape[0], CHUNK_BYTES)
        lse = hidden.new_empty(n, dtype=torch.float32)
        logprobs = torch.empty_like(lse)
        ent = torch.empty_like(lse) if entropy else lse.new_empty(0)
        # A frozen head (LoRA) and no entropy gradient: a log-prob's gradient
        # with respect to its hidden state is its own gradient times
        # (onehot - p) / T @ W, taken here rather than the logits made again.
        unit = torch.empty_like(hidden) if frozen else None
        for i in range(0, n, size):
            z = _logits(hidden[i : i + size], weight, bias, temperature)
            lse[i : i + size] = s = torch.logsumexp(z, -1)
            t = targets[i : i + size].unsqueeze(-1)
            logprobs[i : i + size] = z.gather(-1, t).squeeze(-1) - s
            if entropy:
                ent[i : i + size] = s - (torch.softmax(z, -1) * z).sum(-1)
            if frozen:  # the gradient of a log-prob of 1
                gz = _grad_logits(
                    z, s, t, torch.ones_like(s).unsqueeze(-1), temperature
                )
                unit[i : i + size] = gz.to(weight.dtype) @ weight
        ctx.temperature, ctx.size, ctx.grad_ent = temperature, size, grad_ent
        if frozen:
            ctx.save_for_backward(unit)
        else:
            ctx.save_for_backward(hidden, weight, bias, targets, lse, ent)
        ctx.frozen = frozen
        if not grad_ent:
            ctx.mark_non_differentiable(ent)
        return logprobs, ent

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        if ctx.frozen:
            (unit,) = ctx.saved_tensors
            grad_h = (g_lp.unsqueeze(-1) * unit).to(unit.dtype)
            return grad_h, None, None, None, None, None, None, None
        hidden, weight, bias, targets, lse, ent = ctx.saved_tensors
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        temperature, size = ctx.temperature, ctx.size
        use_ent = ctx.grad_ent and g_ent is not None
        grad_h = torch.empty_like(hidden) if want_h else None
        # The weight's gradient is summed over the chunks in place, in float32 for
        # a bf16 or fp16 weight (one rounding to its dtype at the end, as the
        # unfused product's): no (V, H) temporary a chunk.
        low = weight.dtype in (torch.float16, torch.bfloat16)
        acc = torch.float32 if low else None
        grad_w = torch.zeros_like(weight, dtype=acc) if want_w else None
        grad_b = torch.zeros_like(bias, dtype=acc) if want_b else None
        for i in range(0, hidden.shape[0], size):
            h = hidden[i : i + size]
            gz32 = _grad_logits(
                _logits(h, weight, bias, temperature),
                lse[i : i + size],
                targets[i : i + size].unsqueeze(-1),
                g_lp[i : i + size].unsqueeze(-1),
                temperature,
                (ent[i : i + size], g_ent[i : i + size]) if use_ent else None,
            )
            gz = gz32.to(weight.dtype)
            if want_h:
                grad_h[i : i + size] = gz @ weight
            if want_w:
                _add_product(grad_w, gz, gz32, h)
            if want_b:
                grad_b += gz.sum(0).to(grad_b.dtype)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None, None


# Whether this build's matrix product writes float32 from bf16/fp16 inputs on the
# device (``out_dtype``; CUDA): None until tried.
_OUT_DTYPE: dict[str, bool] = {}


def _add_product(acc, gz, gz32, h) -> None:
    """``acc += gz.T @ h`` in place. ``acc`` in the weight's dtype, or float32
    for a bf16/fp16 weight: there the products are taken in the low precision
    and summed in float32 where the device's product can write float32
    (``out_dtype``, CUDA), else in float32 from ``gz32``, the float32 gradient
    ``gz`` was cast from."""
    if acc.dtype == gz.dtype:
        acc.addmm_(gz.t(), h)
        return
    device = acc.device.type
    if device == "cuda" and _OUT_DTYPE.get(device, True):
        try:
            torch.addmm(acc, gz.t(), h, out_dtype=acc.dtype, out=acc)
            _OUT_DTYPE[device] = True
            return
        except (RuntimeError, TypeError):  # a build without it
            _OUT_DTYPE[device] = False
    acc.addmm_(gz32.t(), h.to(acc.dtype))


def head_stats(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``targets`` (..., ) under ``softmax((hidden @ weight.T + bias) /
    temperature)`` from hidden states (..., H), float32, and the full-distribution
    entropy at each position when ``entropy`` (with a gradient only when
    ``entropy_grad``), never holding more than a chunk of the logits."""
    lead = targets.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1)
    grad_ent = bool(entropy and entropy_grad and torch.is_grad_enabled())
    frozen = (
        torch.is_grad_enabled()
        and h.requires_grad
        and not weight.requires_grad
        and (bias is None or not bias.requires_grad)
        and not grad_ent
    )
    lp, ent = _HeadStats.apply(
        h, weight, bias, t, float(temperature), bool(entropy), grad_ent, frozen
    )
    return lp.view(lead), ent.view(lead) if entropy else None


def split_model(model: nn.Module) -> tuple[nn.Module, nn.Linear] | None:
    """The decoder and the plain linear head of a causal LM whose logits are
    ``head(decoder(...).last_hidden_state)`` and whose last hidden state (what a
    value head reads) is that same tensor, or None: a head that is not a plain
    ``nn.Linear`` (an adapter on it), a known transform of the logits in its config,
    weights sharded by FSDP (gathered only in the model's own forward), or a model
    whose own forward gives other numbers on a short input (checked once per model,
    bit for bit, the verdict kept on it)."""
    if _sharded(model):
        return None
    verdict = model.__dict__.get("_fused_head_ok")
    if verdict is None:
        verdict = _check(model)
        model.__dict__["_fused_head_ok"] = verdict
    return _parts(model) if verdict else None


def _sharded(model: nn.Module) -> bool:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return False
    return isinstance(model, FSDPModule)


def _parts(model: nn.Module) -> tuple[nn.Module, nn.Linear] | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    get_decoder = getattr(base, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    head = base.get_output_embeddings()
    if decoder is None or decoder is base or type(head) is not nn.Linear:
        return None
    return decoder, head


def _check(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    if config is not None and head_transformed(config):  # trainer.budget's keys
        return False
    parts = _parts(model)
    if parts is None:
        return False
    decoder, head = parts
    device = head.weight.device
    ids = (torch.arange(1, 6, device=device) % head.out_features).unsqueeze(0)
    mask = torch.ones_like(ids)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()  # no dropout between the two forwards
    try:
        with torch.no_grad():
            out = model(
                input_ids=ids,
                attention_mask=mask,
                output_hidden_states=True,
                use_cache=False,
            )
            h = decoder(input_ids=ids, attention_mask=mask, use_cache=False)
            h = h.last_hidden_state
            same = torch.equal(out.hidden_states[-1], h) and torch.equal(
                out.logits, F.linear(h, head.weight, head.bias)
            )
    except Exception:  # noqa: BLE001 - any failure: the model's own forward
        same = False
    finally:
        for m, mode in modes:
            m.training = mode
    return bool(same)
