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


def test_trl_names_in_a_wandb_run_map_to_ours_and_are_kept():
    out = metric_names.map_metrics(
        "wandb",
        {
            "train/reward": 0.5,
            "train/rewards/acc/mean": 0.25,
            "train/learning_rate": 1e-5,
            "train/sampling/importance_sampling_ratio/mean": 1.01,
            "actor/entropy": 2.0,  # verl logging to W&B
            "eval/reward": 0.1,
        },
    )
    assert out["train/reward"] == out["reward"] == 0.5
    assert out["rewards/acc/mean"] == 0.25 and out["lr"] == 1e-5
    assert out["mismatch/is_ratio_mean"] == 1.01 and out["entropy"] == 2.0
    assert "eval/reward" in out and sum(v == 0.1 for v in out.values()) == 1


def test_wandb_system_metrics_map_to_a_few_of_ours():
    out = metric_names.map_metrics(
        "wandb",
        {
            "system/gpu.0.gpu": 97.0,
            "system/gpu.3.memoryAllocated": 40.0,
            "system/gpu.3.memoryAllocatedBytes": 2e10,
            "system/cpu": 12.5,
            "system/memory_percent": 30.0,
            "system/proc.memory.rssMB": 900.0,
            "system/disk./.usageGB": 10.0,
        },
    )
    assert out["system/gpu/0/util_percent"] == 97.0
    assert out["system/gpu/3/memory_percent"] == 40.0
    assert out["system/gpu/3/memory_bytes"] == 2e10
    assert out["system/cpu/process_percent"] == 12.5
    assert out["system/memory/used_percent"] == 30.0
    assert out["system/memory/process_rss_mb"] == 900.0
    assert out["system/disk./.usageGB"] == 10.0 and len(out) == 13


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


def test_prime_rls_loss_is_the_whole_objective_not_the_policy_loss():
    # prime-rl's loss/mean is compute_loss's sum of its rl (policy gradient plus the
    # kl_tau term), ce and ref_kl components: our "loss", never "policy_loss".
    out = metric_names.map_metrics("prime-rl", {"loss/mean": 0.5})
    assert out == {"loss/mean": 0.5, "loss": 0.5}
