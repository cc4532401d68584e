"""Algorithm presets as data, and their resolution against a run's overrides.

A preset is a handful of choices (advantage estimator, std scaling, loss, clip
bounds, aggregation, group filter, credit assignment, value clip, overlong reward
shaping), not a subclass: PPO, GRPO, Dr. GRPO, DAPO, CISPO and GSPO differ only in
these. :func:`resolve_algorithm` merges a
:class:`trainer.config.AlgorithmConfig` (``None`` = take the preset's value) into a
:class:`ResolvedAlgorithm` where every field is concrete, and rejects combinations
that cannot train. The trainer loop reads only the resolved object.

This module knows the names of losses and estimators, not their math.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.config import AlgorithmConfig


@dataclass(frozen=True)
class Preset:
    """The fields a preset sets; everything else comes from AlgorithmConfig defaults.

    advantage: ``"group"`` (group-relative, GRPO) or ``"gae"`` (critic, PPO).
    std_scaling: ``"group"``, ``"batch"`` or ``"none"``; unused with GAE.
    loss: a name in :data:`trainer.algorithms.LOSSES`.
    clip_low, clip_high: the ratio bounds [1 - clip_low, 1 + clip_high].
    agg: a mode of :func:`trainer.algorithms.agg_loss`.
    group_filter: ``"off"`` or ``"drop_zero_variance"`` (DAPO dynamic sampling).
    credit: ``"outcome"`` one advantage per trajectory, ``"process"`` per-step
        rewards normalised in the group, ``"gae"`` a critic.
    value_clip: the critic's update is clipped to +-value_clip around its
        rollout-time value (CleanRL, verl ``cliprange_value``); 0: unclipped.
    overlong_shaping: the run's reward gets DAPO's ``overlong_penalty`` component
        (arXiv 2503.14476 §3.4) sized to the generation budget.
    delta: TRL's two-sided clip of the ratio (INTELLECT-2, arXiv 2505.07291);
        0: off.
    top_entropy_quantile: train only on this top share of tokens by entropy
        (arXiv 2506.01939; TRL's ``top_entropy_quantile``); 1: every token.
    """

    advantage: str
    std_scaling: str
    loss: str
    clip_low: float
    clip_high: float
    agg: str
    group_filter: str
    credit: str
    value_clip: float = 0.0
    overlong_shaping: bool = False
    delta: float = 0.0
    top_entropy_quantile: float = 1.0


PRESETS: dict[str, Preset] = {
    # PPO with a value head and GAE (arXiv 1707.06347, 1506.02438).
    "ppo": Preset(
        advantage="gae",
        std_scaling="none",
        loss="ppo_clip",
        clip_low=0.2,
        clip_high=0.2,
        agg="token_mean",
        group_filter="off",
        credit="gae",
        value_clip=0.2,
    ),
    # GRPO: group-relative advantage scaled by the group std, per-sequence mean
    # (arXiv 2402.03300).
    "grpo": Preset(
        advantage="group",
        std_scaling="group",
        loss="ppo_clip",
        clip_low=0.2,
        clip_high=0.2,
        agg="seq_mean_token_mean",
        group_filter="off",
        credit="outcome",
    ),
    # Dr. GRPO: no std scaling and a constant normaliser remove GRPO's difficulty
    # and length biases (arXiv 2503.20783).
    "dr_grpo": Preset(
        advantage="group",
        std_scaling="none",
        loss="ppo_clip",
        clip_low=0.2,
        clip_high=0.2,
        agg="seq_mean_token_sum_norm",
        group_filter="off",
        credit="outcome",
    ),
    # DAPO: clip-higher, token-level loss, dynamic sampling, overlong reward shaping
    # (arXiv 2503.14476).
    "dapo": Preset(
        advantage="group",
        std_scaling="group",
        loss="ppo_clip",
        clip_low=0.2,
        clip_high=0.28,
        agg="token_mean",
        group_filter="drop_zero_variance",
        credit="outcome",
        overlong_shaping=True,
    ),
    # CISPO: clipped, stop-gradient importance weights (MiniMax-M1, arXiv
    # 2506.13585); the group filter is optional, off by default.
    "cispo": Preset(
        advantage="group",
        std_scaling="group",
        loss="cispo",
        clip_low=1.0,
        clip_high=4.0,
        agg="token_mean",
        group_filter="off",
        credit="outcome",
    ),
    # GSPO: sequence-level, length-normalised ratios clipped to tiny bounds (arXiv
    # 2507.18071; Qwen3's choice for MoE stability), GRPO's advantage and aggregation.
    "gspo": Preset(
        advantage="group",
        std_scaling="group",
        loss="gspo",
        clip_low=3e-4,
        clip_high=4e-4,
        agg="seq_mean_token_mean",
        group_filter="off",
        credit="outcome",
    ),
}

PRESET_LABELS: dict[str, str] = {
    "ppo": "PPO (GAE with a value head)",
    "grpo": "GRPO (DeepSeekMath)",
    "dr_grpo": "Dr. GRPO (the 'Cursor' variant)",
    "dapo": "DAPO (clip-higher, dynamic sampling)",
    "cispo": "CISPO (MiniMax-M1)",
    "gspo": "GSPO (sequence-level ratios, Qwen3)",
}


@dataclass(frozen=True)
class ResolvedAlgorithm:
    """Every algorithm choice of a run, concrete (no ``None``): what the loop reads."""

    preset: str
    advantage: str
    std_scaling: str
    loss: str
    agg: str
    clip_low: float
    clip_high: float
    group_filter: str
    max_resample_rounds: int
    credit: str
    value_clip: float
    overlong_shaping: bool
    delta: float  # 0: off
    top_entropy_quantile: float  # 1: every token
    kl_beta: float
    kl_kind: str
    kl_clamp: float  # 0: unclamped
    kl_in_reward: bool
    kl_target: float  # 0: fixed coefficient
    kl_horizon: int
    dual_clip: float  # 0: off
    mask_truncated: bool
    rollout_correction: str  # "off" | "token" | "sequence"
    rollout_correction_cap: float
    rollout_correction_mode: str  # "truncate" | "mask"
    rollout_correction_lower: float  # 0: no lower bound
    entropy_coef: float
    gamma: float
    lam: float
    value_coef: float
    eps: float

    @property
    def needs_value_head(self) -> bool:
        """Whether the policy needs a critic (GAE advantages or GAE credit)."""
        return self.advantage == "gae" or self.credit == "gae"


def _get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise KeyError(f"unknown preset {name!r} (known: {known})") from None


def describe_preset(name: str) -> dict[str, Any]:
    """The fields preset ``name`` sets, as a plain dict (for the UI and CLI)."""
    return asdict(_get_preset(name))


def resolve_algorithm(cfg: AlgorithmConfig) -> ResolvedAlgorithm:
    """Merge the config's overrides into its preset and check the result.

    A field set on ``cfg`` (not ``None``) wins over the preset. ``credit="gae"``
    switches a preset's group advantage to GAE (a critic assigns the credit); an
    explicit ``advantage="group"`` with ``credit="gae"``, or ``advantage="gae"``
    with ``credit="outcome"``/``"process"``, is a ValueError naming both fields.
    """
    preset = _get_preset(cfg.preset)
    chosen: dict[str, Any] = {}
    for f in fields(Preset):
        override = getattr(cfg, f.name)
        chosen[f.name] = getattr(preset, f.name) if override is None else override

    if chosen["credit"] == "gae" and chosen["advantage"] != "gae":
        if cfg.advantage is not None:
            raise ValueError(
                f"algorithm.advantage={cfg.advantage!r} conflicts with "
                f"algorithm.credit='gae': GAE credit needs advantage='gae'"
            )
        chosen["advantage"] = "gae"
    if chosen["advantage"] == "gae" and chosen["credit"] != "gae":
        raise ValueError(
            f"algorithm.advantage='gae' needs algorithm.credit='gae' "
            f"(got credit={chosen['credit']!r}); set both, or pick a group advantage"
        )

    _check_options(cfg, chosen)
    correction = cfg.rollout_correction
    return ResolvedAlgorithm(
        preset=cfg.preset,
        max_resample_rounds=cfg.max_resample_rounds,
        kl_beta=cfg.kl_beta,
        kl_kind=cfg.kl_kind,
        kl_clamp=cfg.kl_clamp or 0.0,
        kl_in_reward=cfg.kl_in_reward,
        kl_target=cfg.kl_target or 0.0,
        kl_horizon=cfg.kl_horizon,
        dual_clip=cfg.dual_clip or 0.0,
        mask_truncated=cfg.mask_truncated,
        rollout_correction="off" if correction is None else correction.kind,
        rollout_correction_cap=2.0 if correction is None else correction.cap,
        rollout_correction_mode="truncate" if correction is None else correction.mode,
        rollout_correction_lower=0.0
        if correction is None or correction.lower is None
        else correction.lower,
        entropy_coef=cfg.entropy_coef,
        gamma=cfg.gamma,
        lam=cfg.lam,
        value_coef=cfg.value_coef,
        eps=cfg.eps,
        **chosen,
    )


def _check_options(cfg: AlgorithmConfig, chosen: dict[str, Any]) -> None:
    """Options that cannot work together: a ValueError naming the fields."""
    if cfg.dual_clip is not None and chosen["loss"] == "cispo":
        raise ValueError(
            "algorithm.dual_clip applies to the ppo_clip and gspo losses, not to "
            "algorithm.loss='cispo' (its weights are clipped already)"
        )
    if chosen["delta"] and chosen["loss"] == "cispo":
        raise ValueError(
            "algorithm.delta (the two-sided clip) applies to the ppo_clip and gspo "
            "losses, not to algorithm.loss='cispo'"
        )
    if 0 < chosen["delta"] <= 1:
        raise ValueError(
            f"algorithm.delta must be 0 (off) or > 1 (TRL recommends > 1 + "
            f"clip_high), got {chosen['delta']:g}"
        )
    if cfg.kl_in_reward and cfg.kl_beta <= 0:
        raise ValueError(
            "algorithm.kl_in_reward needs algorithm.kl_beta > 0 (the KL's coefficient)"
        )
    if cfg.kl_target is not None and cfg.kl_beta <= 0:
        raise ValueError(
            "algorithm.kl_target needs algorithm.kl_beta > 0 (the adaptive "
            "coefficient starts there and scales multiplicatively)"
        )
    if chosen["loss"] == "gspo" and "token_sum" in chosen["agg"]:
        # GSPO's ratio is one per sequence: a token sum would weigh a sequence by
        # its length again (verl refuses it; TRL warns).
        raise ValueError(
            f"algorithm.loss='gspo' takes a sequence-level ratio: aggregate it per "
            f"sequence (algorithm.agg='seq_mean_token_mean' or 'token_mean'), not "
            f"with the token sum algorithm.agg={chosen['agg']!r}"
        )
    critic = chosen["advantage"] == "gae" or chosen["credit"] == "gae"
    if cfg.value_clip is not None and cfg.value_clip > 0 and not critic:
        raise ValueError(
            "algorithm.value_clip needs a critic: set algorithm.credit='gae' or pick "
            "the ppo preset"
        )
