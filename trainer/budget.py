"""What one training step needs: its tokens and its memory, from the config and the model.

Pure arithmetic over numbers (no files, no Django): the platform compares the result to
its limits at submit (``dashboard.runs.services.check_budget``), so a config that
cannot fit is refused before it is queued instead of growing a worker until it dies.

The estimate follows what the trainer does (``trainer.rollout.play``,
``trainer.update``), per training process:

* **tokens**: every rollout of the step, ``tasks_per_step x group_size``, each at most
  ``min(max_turns x max_action_tokens + prompt, max_total_tokens)`` tokens long
  (observations are not counted: their length is the environment's, so this is a
  floor of what a step may hold, never more than it can);
* **generation**: all of a process's rollouts are played in lock-step in one batch, so
  the KV cache holds every row at full length (``2 x layers x kv_width`` values a
  token) and the sampler keeps a few ``(rows, vocab)`` float tensors (the continuous
  engine: ``rollout.max_live_episodes`` rows at most, where it is set);
* **update**: one minibatch (``rows / optim.minibatches``), or one micro-batch of it
  (``optim.micro_batch_size`` rows, ``optim.micro_batch_tokens`` tokens), forward
  and backward: the activations autograd
  keeps per token and layer, plus float logits with their gradient (with
  ``optim.fused_head``, one chunk of them); the scoring pass without gradients
  takes 64 rows at a time (no more than a micro-batch's);
* **state**: weights, gradients and AdamW's two moments of the trainable parameters
  (with ``optim.master_weights``, bfloat16 weights' float32 copies and float32
  moments, and the step's float32 gradients of one bucket), a frozen copy for the KL reference (not with LoRA), sharded
  ``processes`` ways under fsdp.

The peak is the state plus the largest of the three phases. Constants are round
(activation counts of a Llama-style block; CUDA workspaces, the allocator's slack and
fragmentation are not counted): the point is to refuse configs that are out by orders
of magnitude, with the numbers that show why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Scoring without gradients goes 64 rows at a time (``trainer.scoring.score``).
SCORE_CHUNK_ROWS = 64
# Float32 (B, V) tensors the sampler holds per token: the logits, their softmax and
# the temperature-scaled copy the sampler's log-probs are taken from.
SAMPLER_VOCAB_COPIES = 3
# Float32 (B, T, V) tensors of a forward with gradient: the logits upcast, the
# softmax behind logsumexp / entropy, and the logits' gradient.
UPDATE_VOCAB_COPIES = 3
SCORE_VOCAB_COPIES = 2  # no gradient: the logits and one softmax
# ``optim.fused_head`` (``trainer.head``): float32 logits are held a chunk of this
# many bytes at a time, whatever the batch.
HEAD_CHUNK_BYTES = 128 * 2**20


def head_chunk_tokens(vocab: int, chunk_bytes: int = HEAD_CHUNK_BYTES) -> int:
    """Tokens per chunk of the fused head: ``chunk_bytes`` of float32 logits, at
    least 16."""
    return max(16, chunk_bytes // (4 * max(vocab, 1)))


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only model that its memory depends on."""

    params: int  # every parameter
    trainable: int  # those the optimizer updates (LoRA: the adapters)
    hidden: int
    intermediate: int  # the MLP's width
    layers: int
    kv_width: int  # key/value heads x head dim: a token's K (or V) in one layer
    vocab: int
    dtype_bytes: int  # 2 for bfloat16, 4 for float32
    # The config names a transform of the head's product (``HEAD_TRANSFORMS``):
    # such a model is scored through its whole logits, fused head or not.
    head_transformed: bool = False


# Config keys of a transform some architectures apply to the head's product or its
# input (Gemma's tanh softcap, Cohere's and Granite's scales, Falcon-H1's
# multiplier, MiniCPM's width scaling): ``optim.fused_head`` leaves such a model
# its own forward (``trainer.head.split_model``, which also checks the numbers).
HEAD_TRANSFORMS = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "lm_head_multiplier",
    "dim_model_base",
)


def head_transformed(cfg: Any) -> bool:
    """Whether a model config (a ``config.json`` mapping or a transformers config,
    its ``text_config`` too) sets one of ``HEAD_TRANSFORMS`` to something but
    nothing (None, 1)."""
    parts = [cfg]
    text = cfg.get("text_config") if isinstance(cfg, Mapping) else None
    text = text if text is not None else getattr(cfg, "text_config", None)
    if text is not None:
        parts.append(text)
    for part in parts:
        for key in HEAD_TRANSFORMS:
            value = (
                part.get(key) if isinstance(part, Mapping) else getattr(part, key, None)
            )
            if value not in (None, 1, 1.0):
                return True
    return False


@dataclass(frozen=True)
class StepBudget:
    """One step's estimate. Memory in bytes, per training process."""

    rollouts: int  # rollouts in the step (every process together)
    rollout_tokens: int  # the longest a rollout can be
    tokens: int  # rollouts x rollout_tokens
    capped: bool  # True: max_total_tokens binds the rollout's length
    state_bytes: int  # weights, gradients, optimizer moments, KL reference
    generation_bytes: int
    update_bytes: int
    score_bytes: int

    @property
    def memory_bytes(self) -> int:
        return self.state_bytes + max(
            self.generation_bytes, self.update_bytes, self.score_bytes
        )

    @property
    def token_fields(self) -> list[str]:
        """The config fields that set ``tokens``."""
        length = (
            ["rollout.max_total_tokens"]
            if self.capped
            else ["rollout.max_turns", "rollout.max_action_tokens"]
        )
        return ["rollout.tasks_per_step", "rollout.group_size", *length]

    @property
    def phase(self) -> str:
        """The phase that sets the peak: ``generation``, ``update`` or ``scoring``."""
        phases = {
            "generation": self.generation_bytes,
            "update": self.update_bytes,
            "scoring": self.score_bytes,
        }
        return max(phases, key=phases.__getitem__)


def llama_params(
    *,
    vocab: int,
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    tied: bool,
) -> int:
    """A Llama/Qwen/Mistral-style model's parameters: embeddings, per layer attention
    (grouped KV) + gated MLP + two norms, the final norm and an untied head. Biases
    (Qwen's q/k/v) are not counted."""
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    per_layer = attn + 3 * hidden * intermediate + 2 * hidden
    head = 0 if tied else vocab * hidden
    return vocab * hidden + layers * per_layer + hidden + head


def shape_from_hf_config(
    cfg: Mapping[str, Any], *, dtype_bytes: int, params: int | None = None
) -> ModelShape | None:
    """The shape a Hugging Face ``config.json`` (Llama/Qwen/Mistral keys) describes;
    ``params``: the exact count when known (safetensors headers), else the formula's.
    None when the keys are missing or absurd."""
    try:
        vocab, hidden = int(cfg["vocab_size"]), int(cfg["hidden_size"])
        inter, layers = int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or hidden // heads)
    except (KeyError, TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    sizes = (vocab, hidden, inter, layers, heads, kv_heads, head_dim)
    if min(sizes) <= 0 or max(sizes) >= 2**40:
        return None
    if params is None:
        params = llama_params(
            vocab=vocab,
            hidden=hidden,
            intermediate=inter,
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            tied=bool(cfg.get("tie_word_embeddings", True)),
        )
    return ModelShape(
        params=params,
        trainable=params,
        hidden=hidden,
        intermediate=inter,
        layers=layers,
        kv_width=kv_heads * head_dim,
        vocab=vocab,
        dtype_bytes=dtype_bytes,
        head_transformed=head_transformed(cfg),
    )


def default_shape(size: str, vocab: int, *, dtype_bytes: int) -> ModelShape:
    """The default Llama-style model of ``model.size`` (``trainer.models.MODEL_SIZES``:
    tied embeddings, as many KV heads as heads) over a vocabulary of ``vocab``."""
    from trainer.models import MODEL_SIZES

    hidden, layers, heads, inter = MODEL_SIZES[size]
    cfg = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "tie_word_embeddings": True,
    }
    shape = shape_from_hf_config(cfg, dtype_bytes=dtype_bytes)
    assert shape is not None  # the table's sizes are all positive
    return shape


def with_lora(shape: ModelShape, rank: int, targets: int) -> ModelShape:
    """``shape`` with LoRA adapters of ``rank`` on ``targets`` square-ish projections a
    layer (``hidden x hidden`` taken for each: an upper bound for k/v under grouped
    attention): only the adapters are trainable."""
    adapters = shape.layers * targets * rank * 2 * shape.hidden
    return ModelShape(
        params=shape.params + adapters,
        trainable=adapters,
        hidden=shape.hidden,
        intermediate=shape.intermediate,
        layers=shape.layers,
        kv_width=shape.kv_width,
        vocab=shape.vocab,
        dtype_bytes=shape.dtype_bytes,
        head_transformed=shape.head_transformed,
    )


def rollout_length(rollout: Any, prompt_tokens: int = 0) -> tuple[int, bool]:
    """(the longest a rollout can be, whether ``max_total_tokens`` binds)."""
    free = rollout.max_turns * rollout.max_action_tokens + max(prompt_tokens, 0)
    if free >= rollout.max_total_tokens:
        return rollout.max_total_tokens, True
    return free, False


def activation_values(shape: ModelShape) -> int:
    """Values autograd keeps per token and layer of a Llama-style block: the inputs of
    the two norms, of q/k/v and o, the attention output (fused attention keeps no
    scores), and of the gated MLP's gate, up, activation and down projections."""
    return 6 * shape.hidden + 2 * shape.kv_width + 4 * shape.intermediate


def trained_bytes(dtype_bytes: int, config: Any) -> int:
    """Bytes a trainable parameter adds besides its weight: its gradient and AdamW's
    two moments in its dtype, or (``optim.master_weights``, a low-precision weight)
    the gradient in its dtype and a float32 copy with float32 moments
    (``trainer.optimizer``)."""
    if dtype_bytes < 4 and config.optim.master_weights:
        return dtype_bytes + 3 * 4
    return 3 * dtype_bytes


# trainer.optimizer.BUCKET_ELEMENTS (this module stays free of torch).
OPTIMIZER_BUCKET = 1 << 26


def step_bytes(shape: ModelShape, config: Any) -> int:
    """What the optimizer step holds besides the state, with master weights: a
    bucket's gradients in float32 and a float32 temporary of AdamW's, 8 bytes an
    element, a bucket at most ``OPTIMIZER_BUCKET`` elements or the largest trained
    tensor (taken as the embedding, shared with the head, in a full fine-tune)."""
    if shape.dtype_bytes >= 4 or not config.optim.master_weights:
        return 0
    largest = shape.vocab * shape.hidden if shape.trainable == shape.params else 0
    return 8 * min(shape.trainable, max(OPTIMIZER_BUCKET, largest))


def estimate_step(
    config: Any, shape: ModelShape, *, prompt_tokens: int = 0, kl_reference: bool
) -> StepBudget:
    """One step of ``config`` (a ``TrainConfig``) on a model of ``shape``;
    ``kl_reference``: a frozen copy of the weights is kept (KL term on, no LoRA)."""
    r, processes = config.rollout, config.resources.processes
    length, capped = rollout_length(r, prompt_tokens)
    rollouts = r.tasks_per_step * r.group_size
    # A group never spans processes: each plays its share of the tasks.
    rows = math.ceil(r.tasks_per_step / processes) * r.group_size
    b = shape.dtype_bytes
    shards = processes if config.resources.strategy == "fsdp" else 1
    state = (shape.params * b + shape.trainable * trained_bytes(b, config)) // shards
    state += step_bytes(shape, config) // shards
    if kl_reference:
        state += shape.params * b  # the reference stays whole
    # The continuous engine holds at most rollout.max_live_episodes episodes at once.
    live = min(rows, r.max_live_episodes) if r.max_live_episodes else rows
    kv = live * length * shape.layers * 2 * shape.kv_width * b
    sampler = live * shape.vocab * 4 * SAMPLER_VOCAB_COPIES
    mb_rows = math.ceil(rows / config.optim.minibatches)
    if config.optim.micro_batch_size:
        mb_rows = min(mb_rows, config.optim.micro_batch_size)
    mb_tokens = mb_rows * length
    if config.optim.micro_batch_tokens:  # a longer rollout goes alone
        mb_tokens = min(mb_tokens, max(config.optim.micro_batch_tokens, length))
    # The fused head holds one chunk's logits (the FSDP-sharded model, and one
    # whose logits are more than the head's product, their whole logits), and a
    # trained bf16 head's gradient is summed in a float32 (V, H) buffer.
    fused = (
        config.optim.fused_head
        and config.resources.strategy != "fsdp"
        and not shape.head_transformed
    )
    head_tokens = head_chunk_tokens(shape.vocab) if fused else mb_tokens
    update = (
        mb_tokens * shape.layers * activation_values(shape) * b
        + min(mb_tokens, head_tokens) * shape.vocab * 4 * UPDATE_VOCAB_COPIES
    )
    if fused and b < 4 and shape.trainable == shape.params:
        update += shape.vocab * shape.hidden * 4
    score_rows = min(rows, SCORE_CHUNK_ROWS)
    if config.optim.micro_batch_size:  # scoring goes no wider (trainer.scoring)
        score_rows = min(score_rows, config.optim.micro_batch_size)
    score_tokens = score_rows * length
    if config.optim.micro_batch_tokens:
        score_tokens = min(score_tokens, max(config.optim.micro_batch_tokens, length))
    score = (
        min(score_tokens, head_tokens if fused else score_tokens)
        * shape.vocab
        * 4
        * SCORE_VOCAB_COPIES
    )
    return StepBudget(
        rollouts=rollouts,
        rollout_tokens=length,
        tokens=rollouts * length,
        capped=capped,
        state_bytes=state,
        generation_bytes=kv + sampler,
        update_bytes=update,
        score_bytes=score,
    )


def gib(n: int) -> str:
    """Bytes for messages: ``12.5 GiB``; below 1 GiB in MiB (``340 MiB``, ``2.5
    MiB``), below 1 MiB in KiB, so a small model's step does not read "0.0 GiB"."""
    if n >= 2**30:
        return f"{n / 2**30:,.1f} GiB"
    if n >= 10 * 2**20:
        return f"{n / 2**20:,.0f} MiB"
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{max(n, 0) / 2**10:,.0f} KiB"
