"""The public math API keeps exactly the signatures in ARCHITECTURE.md."""

from __future__ import annotations

import inspect

import pytest

import trainer.algorithms as algorithms

P = inspect.Parameter
POS, KW = P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY
REQUIRED = P.empty

# name -> [(parameter, kind, default)]
SIGNATURES = {
    "group_advantages": [
        ("rewards", POS, REQUIRED),
        ("group_size", POS, REQUIRED),
        ("std_scaling", KW, "group"),
        ("eps", KW, 1e-4),
    ],
    "zero_variance_groups": [
        ("rewards", POS, REQUIRED),
        ("group_size", POS, REQUIRED),
        ("tol", KW, 1e-6),
    ],
    "gae_advantages": [
        ("rewards", POS, REQUIRED),
        ("values", POS, REQUIRED),
        ("gamma", KW, REQUIRED),
        ("lam", KW, REQUIRED),
    ],
    "policy_loss": [
        ("name", POS, REQUIRED),
        ("logprobs", POS, REQUIRED),
        ("old_logprobs", POS, REQUIRED),
        ("advantages", POS, REQUIRED),
        ("mask", POS, REQUIRED),
        ("agg", KW, REQUIRED),
        ("clip_low", KW, REQUIRED),
        ("clip_high", KW, REQUIRED),
        ("max_len", KW, None),
        ("dual_clip", KW, None),
        ("weights", KW, None),
        ("delta", KW, None),
    ],
    "kl_penalty": [
        ("logprobs", POS, REQUIRED),
        ("ref_logprobs", POS, REQUIRED),
        ("kind", KW, REQUIRED),
        ("clamp", KW, 10.0),
    ],
    "rollout_weights": [
        ("old_logprobs", POS, REQUIRED),
        ("sampler_logprobs", POS, REQUIRED),
        ("mask", POS, REQUIRED),
        ("kind", KW, REQUIRED),
        ("cap", KW, REQUIRED),
        ("mode", KW, "truncate"),
        ("lower", KW, None),
    ],
    "high_entropy_mask": [
        ("entropies", POS, REQUIRED),
        ("mask", POS, REQUIRED),
        ("quantile", POS, REQUIRED),
        ("pool", KW, None),
    ],
    "adaptive_kl_coef": [
        ("coef", POS, REQUIRED),
        ("kl", POS, REQUIRED),
        ("target", KW, REQUIRED),
        ("horizon", KW, REQUIRED),
        ("n_steps", KW, 1),
    ],
    "process_advantages": [
        ("step_rewards", POS, REQUIRED),
        ("group_size", POS, REQUIRED),
        ("std_scaling", KW, "group"),
        ("eps", KW, 1e-4),
    ],
}


def test_the_documented_import_works():
    from trainer.algorithms import (  # noqa: F401
        gae_advantages,
        group_advantages,
        policy_loss,
        zero_variance_groups,
    )


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_public_functions_have_exactly_the_documented_parameters(name):
    params = inspect.signature(getattr(algorithms, name)).parameters.values()
    assert [(p.name, p.kind, p.default) for p in params] == SIGNATURES[name]


def test_the_package_exports_the_trainer_names():
    expected = {
        "group_advantages",
        "zero_variance_groups",
        "gae_advantages",
        "policy_loss",
        "process_advantages",
        "kl_k3",
        "kl_penalty",
        "adaptive_kl_coef",
        "rollout_weights",
        "high_entropy_mask",
        "mismatch_metrics",
        "value_loss",
        "agg_loss",
        "masked_mean",
        "PRESETS",
        "resolve_algorithm",
        "describe_preset",
        "ResolvedAlgorithm",
        "LOSSES",
    }
    assert expected <= set(algorithms.__all__)
    assert all(hasattr(algorithms, n) for n in algorithms.__all__)


def test_the_loss_registry_holds_the_documented_losses():
    assert algorithms.LOSSES.names() == ["cispo", "gspo", "ppo_clip"]
