"""The one table of metric names (trainer.metric_names): originals kept, ours added."""

from __future__ import annotations

import copy
import math

import pytest

from trainer import metric_names


@pytest.fixture
def tables(monkeypatch):
    monkeypatch.setattr(metric_names, "NAMES", copy.deepcopy(metric_names.NAMES))
    monkeypatch.setattr(metric_names, "COMMON", dict(metric_names.COMMON))


def test_originals_are_kept_and_ours_added():
    out = metric_names.map_metrics(
        "verl", {"actor/entropy": 0.5, "critic/score/mean": None, "note": "text"}
    )
    assert out["actor/entropy"] == out["entropy"] == 0.5
    assert math.isnan(out["critic/score/mean"]) and math.isnan(out["reward"])
    assert "note" not in out  # text is not a metric


def test_a_name_of_ours_the_trainer_logged_itself_is_not_overwritten():
    out = metric_names.map_metrics("verl", {"actor/entropy": 0.5, "entropy": 0.7})
    assert out["entropy"] == 0.7


def test_booleans_are_not_metrics():
    assert metric_names.map_metrics("verl", {"done": True}) == {}


def test_a_plugin_adds_names_for_its_framework_and_for_every_framework(tables):
    metric_names.register_names("myfork", {"pg/loss": "policy_loss"})
    metric_names.register_names("*", {"system/gpu.0.memory": "system/gpu_memory"})
    out = metric_names.map_metrics("myfork", {"pg/loss": 1.0, "system/gpu.0.memory": 3})
    assert out["policy_loss"] == 1.0 and out["system/gpu_memory"] == 3.0
    assert (
        metric_names.map_metrics("verl", {"system/gpu.0.memory": 3})[
            "system/gpu_memory"
        ]
        == 3.0
    )


def test_a_later_registration_corrects_a_built_in_name(tables):
    metric_names.register_names("verl", {"actor/entropy": "entropy/actor"})
    out = metric_names.map_metrics("verl", {"actor/entropy": 0.5})
    assert out == {"actor/entropy": 0.5, "entropy/actor": 0.5}


@pytest.mark.parametrize(
    "framework, names",
    [("", {"a": "b"}), ("x", {"a": ""}), ("x", {1: "b"}), (None, {"a": "b"})],
)
def test_bad_registrations_name_the_problem(tables, framework, names):
    with pytest.raises(ValueError, match="framework|names"):
        metric_names.register_names(framework, names)


@pytest.mark.parametrize(
    "framework, theirs, ours",
    [
        (
            "trl",
            "train/sampling/importance_sampling_ratio/mean",
            "mismatch/is_ratio_mean",
        ),
        ("trl", "sample/staleness_max", "off_policy/staleness_max"),
        ("prime-rl", "mismatch_kl/all/mean", "mismatch/kl"),
        ("prime-rl", "off_policy/mean", "off_policy/staleness"),
        (
            "miles",
            "train/train_rollout_logprob_abs_diff",
            "mismatch/logprob_abs_diff_mean",
        ),
        ("miles", "rollout/fully_async/avg_staleness", "off_policy/staleness"),
        ("tinker", "optim/kl_sample_train_v1", "mismatch/kl"),
        ("verl", "training/rollout_probs_diff_mean", "mismatch/prob_diff_mean"),
    ],
)
def test_each_trainers_staleness_and_mismatch_names_land_in_a_charted_family(
    framework, theirs, ours
):
    out = metric_names.map_metrics(framework, {theirs: 0.25})
    assert out == {theirs: 0.25, ours: 0.25}
    prefixes = [prefix for _, _, prefix in metric_names.FAMILIES]
    assert any(ours.startswith(p) for p in prefixes)
