"""The ``algorithm`` section of the run configuration (:mod:`trainer.config`): a
preset (:data:`trainer.algorithms.presets.PRESETS`) plus overrides, and the sampler
correction. A field left ``None`` takes the preset's value, any field set overrides
it; errors name the field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainer.algorithms import LOSSES, PRESETS
from trainer.algorithms.kl import KL_KINDS
from trainer.config_base import _Strict

PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
LossName = Literal[tuple(LOSSES.names())]  # type: ignore[valid-type]
KlKind = Literal[KL_KINDS]  # type: ignore[valid-type]


class RolloutCorrectionConfig(_Strict):
    """Importance weights of the learner against the sampler's log-probs: truncated
    (TIS; verl's ``rollout_is``) or masked (MIS; verl's ``rollout_rs``), per token or
    per sequence: TRL's ``vllm_importance_sampling_mode`` ``token_truncate``,
    ``token_mask``, ``sequence_truncate``, ``sequence_mask``."""

    kind: Literal["token", "sequence"] = Field(
        description="token: one ratio per token; sequence: one per trajectory (the "
        "product of its tokens' ratios)."
    )
    mode: Literal["truncate", "mask"] = Field(
        "truncate",
        description="truncate: the ratio clamped to [lower, cap] weighs the loss; "
        "mask: a token (or, per sequence, the whole trajectory) whose ratio is "
        "outside [lower, cap] leaves the loss, the others are weighted by their ratio.",
    )
    cap: float = Field(
        2.0,
        ge=1,
        le=1000,
        description="Upper bound of the ratio (TRL's vllm_importance_sampling_clip_max; "
        "verl's rollout_is_threshold).",
    )
    lower: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Lower bound of the ratio (TRL's vllm_importance_sampling_clip_min; "
        "verl's rollout_rs_threshold_lower); empty: none.",
    )


class AlgorithmConfig(_Strict):
    """Algorithm preset plus overrides. ``None`` means: take the preset's value."""

    preset: PresetName = "grpo"
    advantage: Literal["group", "gae"] | None = None
    std_scaling: Literal["group", "batch", "none"] | None = None
    loss: LossName | None = None
    agg: (
        Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] | None
    ) = None
    clip_low: float | None = Field(None, ge=0, le=10)
    clip_high: float | None = Field(None, ge=0, le=10)
    group_filter: Literal["off", "drop_zero_variance"] | None = None
    max_resample_rounds: int = Field(
        4,
        ge=0,
        le=64,
        description="DAPO dynamic sampling: extra sampling rounds at most.",
    )
    credit: Literal["outcome", "process", "gae"] | None = None
    value_clip: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="PPO critic: clip the value update to +-this around the "
        "rollout-time value; 0: unclipped.",
    )
    overlong_shaping: bool | None = Field(
        None,
        description="DAPO: add the overlong_penalty reward component (max_len: the "
        "generation budget, cache: a fifth of it) unless the reward has one.",
    )
    dual_clip: float | None = Field(
        None,
        gt=1,
        le=1000,
        description="Dual-clip PPO: cap a negative-advantage token's loss at "
        "-c * A (verl's clip_ratio_c, typically 3). Empty: off.",
    )
    kl_beta: float = Field(
        0.0, ge=0, le=100, description="KL to the frozen reference: its coefficient."
    )
    kl_kind: KlKind = Field(
        "k3",
        description="KL estimator: k1 log-ratio, k2 half squared log-ratio, k3 "
        "exp(-d) + d - 1 (GRPO), abs |log-ratio| (verl's abs).",
    )
    kl_clamp: float | None = Field(
        10.0,
        gt=0,
        le=1e6,
        description="Clamp each token's k3 KL to [-clamp, clamp], as verl clamps "
        "low_var_kl; k1 and k2 are never clamped (a clamp would zero their gradient "
        "on the diverged tokens). Empty: off.",
    )
    kl_in_reward: bool = Field(
        False,
        description="Subtract kl_beta * KL from the reward (verl's use_kl_in_reward) "
        "instead of adding it to the loss.",
    )
    kl_target: float | None = Field(
        None,
        gt=0,
        le=100,
        description="Adaptive KL coefficient steered towards this KL per token "
        "(Ziegler et al. 2019); empty: fixed kl_beta.",
    )
    kl_horizon: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="Adaptive KL: the controller's horizon, in samples as verl "
        "counts it: each step moves the coefficient by a factor 1 + e * n / horizon, "
        "e = clip(KL / kl_target - 1, -0.2, 0.2), n the trajectories trained that "
        "step (10000 with 64 a step: 10x the target for 300 steps moves it +47%).",
    )
    mask_truncated: bool = Field(
        False,
        description="Truncated rollouts get no gradient (DAPO's overlong filtering).",
    )
    delta: float | None = Field(
        None,
        ge=0,
        le=1000,
        description="Two-sided clip (TRL's delta, INTELLECT-2): the ratio of the "
        "unclipped PPO term is clamped to at most delta, so a negative-advantage "
        "token's loss stops growing past it; > 1 (TRL: > 1 + clip_high); 0: off.",
    )
    top_entropy_quantile: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Train only on this top share of the minibatch's tokens by "
        "entropy (arXiv 2506.01939, TRL's top_entropy_quantile; 0.2 recommended); "
        "the others are masked (low_entropy); 1: every token.",
    )
    rollout_correction: RolloutCorrectionConfig | None = Field(
        None,
        description="Weight tokens by pi_learner / pi_sampler, truncated or masked "
        "to [lower, cap]; empty: off.",
    )
    entropy_coef: float = Field(
        0.0,
        ge=-1,
        le=1,
        description="Entropy bonus: this times the trained tokens' entropy, "
        "aggregated as the loss is, is subtracted from the loss; under a "
        "top-entropy mask the masked tokens count 0, as in the policy loss.",
    )
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    value_coef: float = Field(0.5, ge=0, le=100)
    eps: float = Field(
        1e-4, gt=0, le=1, description="Added to the std in advantage scaling."
    )
