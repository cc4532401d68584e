"""One table of metric names: what each trainer calls a metric, mapped to ours.

Every importer and receiver (verl's rollout dumps, TRL, trackio, W&B run directories,
TensorBoard, prime-rl, miles, Tinker) maps names through :func:`map_metrics` and
nothing else, so the table below is the one place a name is decided. The originals
are always kept: a run imported from verl shows ``actor/entropy`` *and* our
``entropy``, and a name the table does not know is stored as it came.

``NAMES[framework]`` maps a framework's name to ours; ``COMMON`` applies to every
framework (names several of them share, W&B's system metrics). A logger's runs
(``wandb``) carry whichever trainer's names logged into them, so its lookups go on
through those trainers' tables (:data:`CARRIED`). A plugin adds or corrects names with
:func:`register_names` (say for a fork that renamed a metric); later registrations win
over the built-in entries they repeat.

Ours are the names of :mod:`trainer.metrics` (named like TRL and verl where a name
exists), plus the families the run page charts when a run reports them:

* ``off_policy/staleness``: how many policy versions old the sampled data was
  (async trainers: verl ``fully_async``, prime-rl's off-policy steps, TRL async);
* ``mismatch/*``: the trainer's log-probs against the sampler's (``mismatch/kl``,
  ``mismatch/logprob_abs_diff_mean``, ``mismatch/is_ratio_mean``...).

:data:`FAMILIES` names those families for the run page: a chart per family, drawn
when a run reports any of its names.

Pure data and two functions: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# verl name -> ours (names from verl's metric_utils.py, dp_actor.py, core_algos.py).
# ``actor/ppo_kl`` is KL(old || new policy) of the PPO update, not the KL to the
# reference that our (and TRL's) ``kl`` means: that one is ``actor/kl_loss``
# (use_kl_loss) or ``actor/reward_kl_penalty`` (KL in the reward), so only those map.
VERL = {
    "critic/score/mean": "reward",
    "critic/advantages/mean": "advantages/mean",
    "critic/advantages/max": "advantages/max",
    "critic/advantages/min": "advantages/min",
    "response_length/mean": "completions/mean_length",
    "actor/entropy": "entropy",
    "actor/pg_clipfrac": "clip_ratio/region_mean",
    "actor/pg_loss": "policy_loss",
    "actor/grad_norm": "grad_norm",
    "actor/kl_loss": "kl",
    "actor/reward_kl_penalty": "kl",
    "num_turns/mean": "num_turns",
    "timing_s/update_actor": "timing_s/update",
    # |p_rollout - p_actor| over response tokens (verl/utils/debug/metrics.py,
    # calculate_debug_metrics): probabilities, not log-probs.
    "training/rollout_probs_diff_mean": "mismatch/prob_diff_mean",
    "training/rollout_probs_diff_max": "mismatch/prob_diff_max",
}

# TRL (1.16, GRPOTrainer.log through transformers' Trainer) logs most names as ours
# once its ``train/`` prefix is dropped (as W&B and TensorBoard receive them). Its
# ``loss`` is the Trainer's total loss, like our ``loss``; ``sampling/*`` compare
# the trainer's log-probs with vLLM's, our ``mismatch/*``.
# The rest: GRPOTrainer._generate_and_score_completions (trl/trainer/grpo_trainer.py,
# with vLLM importance-sampling correction) and AsyncRolloutDataset
# (trl/experimental/async_grpo/async_grpo_trainer.py), TRL 1.16.
TRL = {
    **{
        name: name
        for name in (
            "reward",
            "reward_std",
            "frac_reward_zero_std",
            "kl",
            "entropy",
            "loss",
            "policy_loss",
            "grad_norm",
            "num_tokens",
        )
    },
    "learning_rate": "lr",
    # |old_per_token_logps - sampling_per_token_logps| over completion tokens
    "sampling/sampling_logp_difference/mean": "mismatch/logprob_abs_diff_mean",
    "sampling/sampling_logp_difference/max": "mismatch/logprob_abs_diff_max",
    "sampling/importance_sampling_ratio/min": "mismatch/is_ratio_min",
    "sampling/importance_sampling_ratio/mean": "mismatch/is_ratio_mean",
    "sampling/importance_sampling_ratio/max": "mismatch/is_ratio_max",
    # trainer's model version minus the sample's
    "sample/staleness_mean": "off_policy/staleness",
    "sample/staleness_max": "off_policy/staleness_max",
}


# prime-rl (PrimeIntellect-ai/prime-rl): the trainer logs src/prime_rl/trainer/rl/
# train.py's tensor stats (``entropy/all/mean``, ``mismatch_kl/all/{mean,max}``,
# ``loss/mean``), ``optim/grad_norm`` and ``perf/throughput``. ``loss/mean`` is the
# whole objective, our ``loss``, not ``policy_loss``: loss.py ``compute_loss`` returns
# rl + ce + ref_kl components, and the rl one (``default_loss_fn``, DPPO) already
# adds ``kl_tau * log_ratio**2`` to the policy-gradient term. Its scale differs from
# ours: it is the mean over micro-batches (of every rank) of each one's share (each
# divided by the global token count), the step's loss over the micro-batch count.
# The orchestrator (src/prime_rl/orchestrator/orchestrator.py) logs
# ``off_policy/{mean,max}`` (steps between
# the policy a batch trains and the one that generated it) and the rollout stats of
# orchestrator/metrics.py, ``train/agg/effective/<agent>/reward/mean`` with ``agent``
# the default single agent's name.
PRIME_RL = {
    "train/agg/effective/agent/reward/mean": "reward",
    "train/agg/effective/num_turns/mean": "num_turns",
    "train/agg/effective/num_output_tokens/mean": "completions/mean_length",
    "entropy/all/mean": "entropy",
    "loss/mean": "loss",
    "optim/grad_norm": "grad_norm",
    "perf/throughput": "perf/tokens_per_s",
    "mismatch_kl/all/mean": "mismatch/kl",
    "mismatch_kl/all/max": "mismatch/kl_max",
    "off_policy/mean": "off_policy/staleness",
    "off_policy/max": "off_policy/staleness_max",
}

# miles (radixark/miles): rollout stats of miles/backends/training_utils/log_utils.py
# log_rollout_data (``rollout/<field>``, per-token fields as sample means) and
# miles/ray/rollout/metrics.py (``response_len/*``), train stats of log_train_step
# (``train/<loss key>`` from loss_hub/losses.py), fully-async staleness from
# miles/rollout/fully_async_data_buffer.py.
MILES = {
    "rollout/raw_reward": "reward",
    "rollout/advantages": "advantages/mean",
    "rollout/entropy": "entropy",
    "rollout/response_len/mean": "completions/mean_length",
    "response_len/mean": "completions/mean_length",  # older miles, without rollout/
    "train/pg_loss": "policy_loss",
    "train/grad_norm": "grad_norm",
    "train/pg_clipfrac": "clip_ratio/region_mean",
    "train/kl_loss": "kl",
    # mean |train log-prob - rollout log-prob| over loss tokens
    "train/train_rollout_logprob_abs_diff": "mismatch/logprob_abs_diff_mean",
    "rollout/fully_async/avg_staleness": "off_policy/staleness",
    "rollout/fully_async/max_staleness": "off_policy/staleness_max",
    # KL between the rollout's and the trainer's log-probs (loss_hub/losses.py)
    "train/train_rollout_kl": "mismatch/kl",
}

# Tinker cookbook (thinking-machines-lab/tinker-cookbook): tinker_cookbook/rl/
# metric_util.py (``env/all/...``) and rl/metrics.py compute_kl_sample_train (the
# sampler's log-probs against the trainer's: v1 the mean difference, v2 half the mean
# squared difference; ``optim/entropy`` the sampling distribution's entropy).
TINKER = {
    "env/all/reward/total": "reward",
    "env/all/turns_per_episode": "num_turns",
    "optim/entropy": "entropy",
    "optim/kl_sample_train_v1": "mismatch/kl",
    "optim/kl_sample_train_v2": "mismatch/kl_v2",
}

# W&B's system metrics, as its UI names them (``system/`` + the key the wandb package
# samples: ``gpu.0.gpu``, ``cpu``, ``memory_percent``...), to a few of ours. Per GPU
# index, for the first 16 devices.
GPUS = 16
WANDB_GPU = {
    "gpu": "util_percent",
    "memoryAllocated": "memory_percent",
    "memoryAllocatedBytes": "memory_bytes",
    "powerWatts": "power_w",
    "temp": "temp_c",
}
WANDB_SYSTEM = {
    **{
        f"system/gpu.{i}.{theirs}": f"system/gpu/{i}/{ours}"
        for i in range(GPUS)
        for theirs, ours in WANDB_GPU.items()
    },
    "system/cpu": "system/cpu/process_percent",
    "system/memory_percent": "system/memory/used_percent",
    "system/memory": "system/memory/used_percent",  # its name before wandb 0.17
    "system/proc.memory.rssMB": "system/memory/process_rss_mb",
    "system/proc.memory.availableMB": "system/memory/available_mb",
}

NAMES: dict[str, dict[str, str]] = {
    "verl": VERL,
    "trl": TRL,
    "wandb": {},
    "prime-rl": PRIME_RL,
    "miles": MILES,
    "tinker": TINKER,
}

# The families the run page charts when present: (id, title, prefix of our names).
FAMILIES = (
    ("staleness", "Staleness (policy versions behind)", "off_policy/"),
    ("mismatch", "Train/inference mismatch", "mismatch/"),
)

COMMON: dict[str, str] = dict(WANDB_SYSTEM)

_PREFIXES = {"trl": ("train/",)}

# Name families that are ours as they are once the framework's prefix is dropped
# (``train/rewards/acc/mean`` is our ``rewards/acc/mean``).
_OURS_AS_IS = {"trl": ("rewards/", "completions/", "clip_ratio/", "tools/")}

# A logger's runs carry the names of whichever trainer logged into it: a W&B run
# directory holds TRL's or verl's names, looked up in their tables, in this order.
CARRIED = {"wandb": ("trl", "verl")}


def register_names(framework: str, names: Mapping[str, str]) -> None:
    """Add (or correct) ``framework``'s names: ``{their name: ours}``. ``"*"`` is
    :data:`COMMON`, applied to every framework."""
    if not isinstance(framework, str) or not framework:
        raise ValueError("framework: must be a non-empty string")
    for theirs, ours in names.items():
        if not (isinstance(theirs, str) and isinstance(ours, str) and theirs and ours):
            raise ValueError(f"names: {theirs!r} -> {ours!r} must be non-empty strings")
    table = COMMON if framework == "*" else NAMES.setdefault(framework, {})
    table.update(names)


def ours(framework: str, name: str) -> str | None:
    """Our name for ``framework``'s ``name`` (its prefixes dropped), or None; a
    logger (:data:`CARRIED`) looks in its trainers' tables too."""
    for source in (framework, *CARRIED.get(framework, ())):
        mapped = _ours_in(source, name)
        if mapped is not None:
            return mapped
    return COMMON.get(name)


def _ours_in(framework: str, name: str) -> str | None:
    for prefix in _PREFIXES.get(framework, ()):
        name = name.removeprefix(prefix)
    mapped = NAMES.get(framework, {}).get(name)
    if mapped is None and name.startswith(_OURS_AS_IS.get(framework, ())):
        mapped = name
    return mapped


def map_metrics(framework: str, data: Mapping[str, Any]) -> dict[str, float]:
    """``data``'s numbers (null, as JSON writes NaN, back to NaN; booleans and text
    dropped) under their own names, plus ours for the names the table knows, unless
    the trainer logged that name of ours itself."""
    out: dict[str, float] = {}
    for name, value in data.items():
        if value is None:
            out[name] = math.nan
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    for name in list(out):
        mapped = ours(framework, name)
        if mapped is not None and mapped not in data:
            out.setdefault(mapped, out[name])
    return out
