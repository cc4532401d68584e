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
        kl_beta=0.04,
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
    for name in ("grpo", "dr_grpo", "dapo", "cispo"):
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
    }


def test_describe_preset_rejects_an_unknown_name_listing_known_ones():
    with pytest.raises(KeyError, match="cispo, dapo, dr_grpo, grpo, ppo"):
        describe_preset("a2c")
