"""One table of the well-known training settings, as each framework's config spells
them (issue 22.10e): comparing a run of ours with a TRL or verl run lines up
``optim.lr`` with TRL's ``learning_rate`` and verl's ``actor_rollout_ref.actor.optim.lr``
instead of listing three unmatched rows.

A setting's paths are dotted (as :func:`dashboard.pages.schema.flatten` writes a
config); where a framework has several spellings (verl's single ``clip_ratio`` or its
``clip_ratio_low``/``clip_ratio_high``) the first present wins, unless it is None and
a later one is present (TRL's ``epsilon_high`` None means ``epsilon``). ``None`` values
of our algorithm fields mean "the preset's", resolved through
:mod:`trainer.algorithms.presets`.

Pure data and two functions: no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_V = "actor_rollout_ref."  # verl's actor, rollout and reference settings

# (label, {framework: (path, ...)}), in the order the compare page lists them.
SETTINGS: tuple[tuple[str, dict[str, tuple[str, ...]]], ...] = (
    (
        "learning rate",
        {
            "ours": ("optim.lr",),
            "trl": ("learning_rate",),
            "verl": (_V + "actor.optim.lr",),
        },
    ),
    (
        "group size (samples per prompt)",
        {
            "ours": ("rollout.group_size",),
            "trl": ("num_generations",),
            "verl": (_V + "rollout.n",),
        },
    ),
    (
        "prompts per step",
        {"ours": ("rollout.tasks_per_step",), "verl": ("data.train_batch_size",)},
    ),
    (
        "per-device batch (completions)",
        {
            "ours": ("optim.micro_batch_size",),
            "trl": ("per_device_train_batch_size",),
            "verl": (_V + "actor.ppo_micro_batch_size_per_gpu",),
        },
    ),
    (
        "per-device token budget (dynamic batch size)",
        {
            "ours": ("optim.micro_batch_tokens",),
            "verl": (_V + "actor.ppo_max_token_len_per_gpu",),
        },
    ),
    (
        "gradient accumulation / mini-batches",
        {
            "ours": ("optim.minibatches",),
            "trl": ("gradient_accumulation_steps",),
            "verl": (_V + "actor.ppo_mini_batch_size",),
        },
    ),
    (
        "KL coefficient (beta)",
        {
            "ours": ("algorithm.kl_beta",),
            "trl": ("beta",),
            "verl": (_V + "actor.kl_loss_coef", "algorithm.kl_ctrl.kl_coef"),
        },
    ),
    (
        "clip range low (epsilon)",
        {
            "ours": ("algorithm.clip_low",),
            "trl": ("epsilon",),
            "verl": (_V + "actor.clip_ratio_low", _V + "actor.clip_ratio"),
        },
    ),
    (
        "clip range high (epsilon_high)",
        {
            "ours": ("algorithm.clip_high",),
            "trl": ("epsilon_high", "epsilon"),
            "verl": (_V + "actor.clip_ratio_high", _V + "actor.clip_ratio"),
        },
    ),
    (
        "loss aggregation",
        {
            "ours": ("algorithm.agg",),
            "trl": ("loss_type",),
            "verl": (_V + "actor.loss_agg_mode",),
        },
    ),
    (
        "updates per batch (epochs / iterations)",
        {
            "ours": ("optim.epochs",),
            "trl": ("num_iterations",),
            "verl": (_V + "actor.ppo_epochs",),
        },
    ),
    (
        "max prompt length",
        {"trl": ("max_prompt_length",), "verl": ("data.max_prompt_length",)},
    ),
    (
        "max completion length (ours: per turn)",
        {
            "ours": ("rollout.max_action_tokens",),
            "trl": ("max_completion_length",),
            "verl": ("data.max_response_length",),
        },
    ),
    (
        "sampling temperature",
        {
            "ours": ("rollout.temperature",),
            "trl": ("temperature",),
            "verl": (_V + "rollout.temperature",),
        },
    ),
    (
        "top-p",
        {
            "ours": ("rollout.top_p",),
            "trl": ("top_p",),
            "verl": (_V + "rollout.top_p",),
        },
    ),
    (
        "sequences decoded at once at most",
        {
            "ours": ("rollout.max_live_episodes",),
            "verl": (_V + "rollout.max_num_seqs",),
        },
    ),
    (
        "gradient clipping (max norm)",
        {
            "ours": ("optim.grad_clip",),
            "trl": ("max_grad_norm",),
            "verl": (_V + "actor.grad_clip",),
        },
    ),
    (
        "weight decay",
        {
            "ours": ("optim.weight_decay",),
            "trl": ("weight_decay",),
            "verl": (_V + "actor.optim.weight_decay",),
        },
    ),
    (
        "entropy bonus coefficient",
        {"ours": ("algorithm.entropy_coef",), "verl": (_V + "actor.entropy_coeff",)},
    ),
    (
        "log-probs from hidden states in chunks (fused linear head)",
        {
            "ours": ("optim.fused_head",),
            "trl": ("use_liger_kernel",),
            "verl": (_V + "model.use_fused_kernels",),
        },
    ),
    (
        "compiled training forward (torch.compile)",
        {"ours": ("optim.compile",), "trl": ("torch_compile",)},
    ),
    (
        "training steps",
        {
            "ours": ("steps",),
            "trl": ("max_steps",),
            "verl": ("trainer.total_training_steps",),
        },
    ),
    ("seed", {"ours": ("seed",), "trl": ("seed",), "verl": ("data.seed",)}),
    (
        "model",
        {
            "ours": ("model.path",),
            "trl": ("model_name_or_path",),
            "verl": (_V + "model.path",),
        },
    ),
)

# A key only this framework's config has: how a config is recognised.
MARKERS = {
    "ours": ("rollout.group_size", "algorithm.preset"),
    "trl": ("num_generations", "per_device_train_batch_size"),
    "verl": (_V + "rollout.n", "data.train_batch_size"),
}

# Our fields whose 0 means something else than none (their config descriptions):
# the compare page writes it beside the 0.
ZERO_MEANS = {
    "optim.micro_batch_size": "the whole minibatch at once",
    "optim.micro_batch_tokens": "no limit",
}

# Our algorithm fields whose None means "the preset's value".
_PRESET_FIELDS = {"algorithm.clip_low": "clip_low", "algorithm.clip_high": "clip_high"}
_PRESET_FIELDS["algorithm.agg"] = "agg"


def framework_of(flat: Mapping[str, Any]) -> str:
    """``ours``, ``trl``, ``verl``, or ``""``: whose marker keys ``flat`` (a config
    flattened to dotted paths) has."""
    for name, keys in MARKERS.items():
        if any(k in flat for k in keys):
            return name
    return ""


def _preset_value(flat: Mapping[str, Any], path: str) -> Any:
    from trainer.algorithms.presets import PRESETS

    preset = PRESETS.get(str(flat.get("algorithm.preset") or "grpo"))
    return getattr(preset, _PRESET_FIELDS[path], None) if preset else None


def lookup(flat: Mapping[str, Any], framework: str, label: str) -> tuple[str, Any]:
    """(the path found, its value) of setting ``label`` in ``flat``, or ``("", None)``.
    Our preset-defaulted fields read as the preset's value."""
    paths = dict(SETTINGS)[label].get(framework, ())
    present = [p for p in paths if p in flat]
    for i, path in enumerate(present):
        value = flat[path]
        if value is None and framework == "ours" and path in _PRESET_FIELDS:
            value = _preset_value(flat, path)
        if value is None and i + 1 < len(present):
            continue  # TRL's epsilon_high None: epsilon's value
        return path, value
    return "", None
