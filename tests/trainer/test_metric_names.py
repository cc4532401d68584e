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
