"""Algorithm presets resolve to the ARCHITECTURE.md table, and overrides win."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from trainer.algorithms import (
    LOSSES,
    PRESETS,
    ResolvedAlgorithm,
    describe_preset,
    resolve_algorithm,
)
from trainer.algorithms.presets import PRESET_LABELS
from trainer.config import AlgorithmConfig

# (advantage, std_scaling, loss, clip_low, clip_high, agg, group_filter, credit)
TABLE = {
    "ppo": ("gae", "none", "ppo_clip", 0.2, 0.2, "token_mean", "off", "gae"),
    "grpo": (
        "group",
        "group",
        "ppo_clip",
        0.2,
        0.2,
        "seq_mean_token_mean",
        "off",
        "outcome",
    ),
    "dr_grpo": (
        "group",
        "none",
        "ppo_clip",
        0.2,
        0.2,
        "seq_mean_token_sum_norm",
        "off",
        "outcome",
    ),
    "dapo": (
        "group",
        "group",
        "ppo_clip",
        0.2,
        0.28,
        "token_mean",
        "drop_zero_variance",
        "outcome",
    ),
    "cispo": ("group", "group", "cispo", 1.0, 4.0, "token_mean", "off", "outcome"),
    "gspo": (
        "group",
        "group",
        "gspo",
        3e-4,
        4e-4,
        "seq_mean_token_mean",
        "off",
        "outcome",
    ),
}
FIELDS = (
    "advantage",
    "std_scaling",
    "loss",
    "clip_low",
    "clip_high",
    "agg",
    "group_filter",
    "credit",
)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_preset_resolves_to_the_table(name):
    algo = resolve_algorithm(AlgorithmConfig(preset=name))
    assert tuple(getattr(algo, f) for f in FIELDS) == TABLE[name]
    assert algo.preset == name


def test_presets_cover_exactly_the_configurable_names():
    preset_literal = AlgorithmConfig.model_fields["preset"].annotation
    assert set(PRESETS) == set(typing.get_args(preset_literal)) == set(TABLE)
    assert set(PRESET_LABELS) == set(PRESETS)
    assert "Dr. GRPO" in PRESET_LABELS["dr_grpo"]


def test_every_preset_names_a_registered_loss():
    assert {p.loss for p in PRESETS.values()} <= set(LOSSES.names())


def test_the_resolved_algorithm_is_frozen_and_fully_concrete():
    algo = resolve_algorithm(AlgorithmConfig())
    assert algo.preset == "grpo"
    assert all(getattr(algo, f.name) is not None for f in dataclasses.fields(algo))
    with pytest.raises(dataclasses.FrozenInstanceError):
        algo.loss = "cispo"  # type: ignore[misc]


def test_config_defaults_pass_through():
    algo = resolve_algorithm(AlgorithmConfig())
    assert (algo.max_resample_rounds, algo.kl_beta, algo.entropy_coef) == (4, 0.0, 0.0)
    assert (algo.gamma, algo.lam, algo.value_coef, algo.eps) == (1.0, 0.95, 0.5, 1e-4)


def test_fields_set_on_the_config_override_the_preset():
    cfg = AlgorithmConfig(
        preset="dapo",
        std_scaling="none",
        loss="cispo",
        agg="seq_mean_token_sum_norm",
        clip_low=0.1,
        clip_high=0.5,
        group_filter="off",
        credit="process",
        kl_beta=0.04,
        max_resample_rounds=2,
    )
    algo = resolve_algorithm(cfg)
    assert algo == ResolvedAlgorithm(
        preset="dapo",
        advantage="group",
        std_scaling="none",
        loss="cispo",
        agg="seq_mean_token_sum_norm",
        clip_low=0.1,
        clip_high=0.5,
        group_filter="off",
        max_resample_rounds=2,
        credit="process",
        value_clip=0.0,
        overlong_shaping=True,
        delta=0.0,
        top_entropy_quantile=1.0,
        kl_beta=0.04,
        kl_kind="k3",
        kl_clamp=10.0,
        kl_in_reward=False,
        kl_target=0.0,
        kl_horizon=10_000,
        dual_clip=0.0,
        mask_truncated=False,
        rollout_correction="off",
        rollout_correction_cap=2.0,
        rollout_correction_mode="truncate",
        rollout_correction_lower=0.0,
        entropy_coef=0.0,
        gamma=1.0,
        lam=0.95,
        value_coef=0.5,
        eps=1e-4,
    )


def test_credit_gae_switches_a_group_preset_to_gae_advantages():
    algo = resolve_algorithm(AlgorithmConfig(preset="grpo", credit="gae"))
    assert algo.advantage == "gae"
    assert algo.needs_value_head


def test_an_explicit_group_advantage_with_gae_credit_is_rejected():
    cfg = AlgorithmConfig(preset="grpo", advantage="group", credit="gae")
    with pytest.raises(ValueError, match=r"algorithm\.advantage.*algorithm\.credit"):
        resolve_algorithm(cfg)


@pytest.mark.parametrize(
    "cfg",
    [
        AlgorithmConfig(preset="grpo", advantage="gae"),
        AlgorithmConfig(preset="ppo", credit="outcome"),
        AlgorithmConfig(preset="ppo", credit="process"),
    ],
)
def test_gae_advantage_without_gae_credit_is_rejected_naming_the_fields(cfg):
    with pytest.raises(ValueError, match=r"algorithm\.advantage.*algorithm\.credit"):
        resolve_algorithm(cfg)


def test_only_gae_needs_a_value_head():
    assert resolve_algorithm(AlgorithmConfig(preset="ppo")).needs_value_head
    for name in ("grpo", "dr_grpo", "dapo", "cispo", "gspo"):
        assert not resolve_algorithm(AlgorithmConfig(preset=name)).needs_value_head


def test_describe_preset_lists_the_fields_it_sets():
    assert describe_preset("dapo") == {
        "advantage": "group",
        "std_scaling": "group",
        "loss": "ppo_clip",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "agg": "token_mean",
        "group_filter": "drop_zero_variance",
        "credit": "outcome",
        "value_clip": 0.0,
        "overlong_shaping": True,
        "delta": 0.0,
        "top_entropy_quantile": 1.0,
    }


def test_describe_preset_rejects_an_unknown_name_listing_known_ones():
    with pytest.raises(KeyError, match="cispo, dapo, dr_grpo, grpo, gspo, ppo"):
        describe_preset("a2c")


def test_ppo_clips_its_critic_and_dapo_shapes_overlong_rewards():
    ppo = resolve_algorithm(AlgorithmConfig(preset="ppo"))
    assert ppo.value_clip == 0.2
    assert (
        resolve_algorithm(AlgorithmConfig(preset="ppo", value_clip=0)).value_clip == 0
    )
    assert resolve_algorithm(AlgorithmConfig(preset="dapo")).overlong_shaping
    assert not resolve_algorithm(AlgorithmConfig(preset="grpo")).overlong_shaping


def test_the_new_options_resolve_to_concrete_values():
    cfg = AlgorithmConfig(
        preset="grpo",
        dual_clip=3.0,
        kl_beta=0.1,
        kl_kind="k2",
        kl_clamp=None,
        kl_in_reward=True,
        kl_target=0.05,
        mask_truncated=True,
        rollout_correction={"kind": "sequence", "cap": 5.0},
    )
    algo = resolve_algorithm(cfg)
    assert (algo.dual_clip, algo.kl_kind, algo.kl_clamp, algo.kl_target) == (
        3.0,
        "k2",
        0.0,
        0.05,
    )
    assert algo.kl_in_reward and algo.mask_truncated
    assert (algo.rollout_correction, algo.rollout_correction_cap) == ("sequence", 5.0)


@pytest.mark.parametrize(
    "cfg, fields",
    [
        ({"preset": "cispo", "dual_clip": 3.0}, ("dual_clip", "loss")),
        ({"kl_in_reward": True}, ("kl_in_reward", "kl_beta")),
        ({"kl_target": 0.1}, ("kl_target", "kl_beta")),
        ({"value_clip": 0.2}, ("value_clip", "credit")),
    ],
)
def test_conflicting_options_are_a_validation_error_naming_the_fields(cfg, fields):
    from pydantic import ValidationError

    from trainer.config import TrainConfig, format_errors

    with pytest.raises(ValidationError) as info:
        TrainConfig.model_validate({"algorithm": cfg})
    lines = format_errors(info.value)
    for f in fields:
        assert any(line.startswith(f"algorithm.{f}: ") for line in lines), lines


@pytest.mark.parametrize(
    "cfg, field",
    [
        ({"dual_clip": 1.0}, "algorithm.dual_clip"),
        ({"kl_kind": "k4"}, "algorithm.kl_kind"),
        (
            {"rollout_correction": {"kind": "batch"}},
            "algorithm.rollout_correction.kind",
        ),
        (
            {"rollout_correction": {"kind": "token", "cap": 0.5}},
            "algorithm.rollout_correction.cap",
        ),
    ],
)
def test_bad_values_of_the_new_options_name_the_field(cfg, field):
    from pydantic import ValidationError

    from trainer.config import TrainConfig, format_errors

    with pytest.raises(ValidationError) as info:
        TrainConfig.model_validate({"algorithm": cfg})
    assert any(line.startswith(f"{field}: ") for line in format_errors(info.value))
