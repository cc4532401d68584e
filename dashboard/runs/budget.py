"""A step that cannot fit is refused at submit: ``trainer.budget``'s estimate against the
platform's limits.

Two limits: ``RUN_MAX_TOKENS_PER_STEP`` on the step's tokens, and a memory limit per
training process: ``RUN_MAX_STEP_MEMORY_MB`` when set, else the memory of the largest
worker that would take the run (its GPU's when the run trains on CUDA, its RAM
otherwise; ``dashboard.runs.workers``). Each refusal is one ``field: message`` line
per config field that drives it, with the numbers. The model's sizes come from its
``config.json`` (``model.path``, already authorised inside the roots) or the default
model's table; nothing is loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.conf import settings

from dashboard.library import model_dirs
from dashboard.runs.workers import Offer

log = logging.getLogger(__name__)
# Special tokens the default word-level tokenizer adds to an environment's words.
SPECIAL_TOKENS = 8
VOCAB_UNKNOWN = 32_000  # an environment whose vocabulary could not be listed


def on_cuda(config: Any, takers: list[Offer]) -> bool:
    """Whether the run trains on a GPU: ``cuda``, or ``auto`` on a worker with one."""
    device = config.model.device
    if device == "auto":
        return any(o.cuda_devices for o in takers)
    return device == "cuda"


def dtype_bytes(config: Any, cuda: bool) -> int:
    dtype = config.model.dtype
    if dtype == "auto":
        return 2 if cuda else 4  # trainer.models.resolve_dtype
    return 4 if dtype == "float32" else 2


def vocabulary_size(config: Any) -> int:
    """The default tokenizer's size: the environment's words and the specials (the
    environment built once per check, :func:`dashboard.runs.envcheck.built`)."""
    from dashboard.runs import envcheck

    words = envcheck.built(config).vocabulary
    if words is None:  # an environment that cannot be built here: a round guess
        log.warning("budget: no vocabulary for env %s", config.env.name)
        return VOCAB_UNKNOWN
    return words + SPECIAL_TOKENS


def model_shape(config: Any, nbytes: int):
    """``trainer.budget.ModelShape`` of the run's model, or None when unknown."""
    from trainer.budget import default_shape, shape_from_hf_config, with_lora

    model = config.model
    if model.path:
        data = model_dirs.read_config(model.path)
        params = model_dirs.param_count(Path(model.path))
        shape = None
        if data is not None:
            shape = shape_from_hf_config(data, dtype_bytes=nbytes, params=params)
    else:
        shape = default_shape(model.size, vocabulary_size(config), dtype_bytes=nbytes)
    if shape is not None and model.lora is not None:
        shape = with_lora(shape, model.lora.r, len(model.lora.target_modules))
    return shape


def memory_limit(cuda: bool, takers: list[Offer]) -> tuple[int | None, str]:
    """(bytes a training process may use, where that number comes from)."""
    if settings.RUN_MAX_STEP_MEMORY_MB:
        return settings.RUN_MAX_STEP_MEMORY_MB << 20, "RUN_MAX_STEP_MEMORY_MB"
    known = [o.gpu_memory_bytes if cuda else o.ram_bytes for o in takers]
    known = [n for n in known if n]
    where = "GPU" if cuda else "RAM"
    return (max(known), f"the {where} of the largest worker") if known else (None, "")


def estimate(config: Any, takers: list[Offer]):
    """(``trainer.budget.StepBudget`` or None when the model is unknown, cuda)."""
    from trainer.algorithms import resolve_algorithm
    from trainer.budget import estimate_step

    cuda = on_cuda(config, takers)
    shape = model_shape(config, dtype_bytes(config, cuda))
    if shape is None:
        return None, cuda
    kl = resolve_algorithm(config.algorithm).kl_beta > 0 and config.model.lora is None
    return estimate_step(config, shape, kl_reference=kl), cuda


def describe(config: Any, takers: list[Offer]) -> str | None:
    """One line for the new-run form: the step's size against the limits."""
    from trainer.budget import gib

    budget, cuda = estimate(config, takers)
    if budget is None:
        return None
    limit, _ = memory_limit(cuda, takers)
    of = f" of {gib(limit)}" if limit else ""
    return (
        f"A step: {budget.tokens:,} tokens (limit "
        f"{settings.RUN_MAX_TOKENS_PER_STEP:,}), about "
        f"{gib(budget.memory_bytes)}{of} per training process."
    )


def check_budget(config: Any, takers: list[Offer]) -> list[str]:
    """Refusals for a step over the tokens limit or the memory limit."""
    from trainer.budget import gib

    budget, cuda = estimate(config, takers)
    if budget is None:
        return []  # a model whose config.json we cannot read fails at its load
    r, errors = config.rollout, []
    length = "max_total_tokens" if budget.capped else "max_turns x max_action_tokens"
    if budget.tokens > settings.RUN_MAX_TOKENS_PER_STEP:
        message = (
            f"a step of {budget.tokens:,} tokens ({r.tasks_per_step} tasks x "
            f"{r.group_size} rollouts x {budget.rollout_tokens:,} tokens, the "
            f"rollout's {length}) is over RUN_MAX_TOKENS_PER_STEP = "
            f"{settings.RUN_MAX_TOKENS_PER_STEP:,}"
        )
        errors += [f"config.{f}: {message}" for f in budget.token_fields]
    limit, source = memory_limit(cuda, takers)
    if limit is not None and budget.memory_bytes > limit:
        phase = {
            "generation": budget.generation_bytes,
            "update": budget.update_bytes,
            "scoring": budget.score_bytes,
        }[budget.phase]
        message = (
            f"a step needs about {gib(budget.memory_bytes)} per training process "
            f"(weights and optimizer {gib(budget.state_bytes)}, {budget.phase} "
            f"{gib(phase)} for {budget.rollouts:,} rollouts of up to "
            f"{budget.rollout_tokens:,} tokens), over {source}: {gib(limit)}"
        )
        fields = [
            *budget.token_fields,
            "model.path" if config.model.path else "model.size",
        ]
        if budget.phase == "generation" and r.engine == "continuous":
            fields.append("rollout.max_live_episodes")  # fewer episodes at once
        if budget.phase in ("update", "scoring") and not config.optim.fused_head:
            fields.append("optim.fused_head")  # the logits held a chunk at a time
        if budget.phase == "update":  # micro-batches: the same update, less memory
            fields += [
                "optim.micro_batch_size",
                "optim.micro_batch_tokens",
                "optim.minibatches",
            ]
        errors += [f"config.{f}: {message}" for f in dict.fromkeys(fields)]
    return errors
