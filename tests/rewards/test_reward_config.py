"""The reward config schema: typed params per component, judges per backend, errors
that name the field."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from rewards import COMPONENTS, DETECTORS, RewardConfig, default_reward_config
from rewards.config import (
    COMPONENT_NAMES,
    DETECTOR_NAMES,
    DetectorConfig,
    FBetaComponent,
    JudgeConfig,
    WeightSchedule,
)
from rewards.params import FBetaParams
from rewards.presets import demo_config, demo_configs, demo_names

RUBRIC = [{"name": "success"}]


def errors(data: dict, model: type[BaseModel] = RewardConfig) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as exc:
        model.model_validate(data)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in exc.value.errors()]


def test_it_names_the_field_path_of_a_bad_component_param():
    errs = errors(
        {"components": [{"name": "outcome"}, {"name": "fbeta", "params": {"beta": 0}}]}
    )
    assert errs == [
        ("components.1.fbeta.params.beta", "Input should be greater than 0")
    ]


def test_it_rejects_unknown_params_of_a_component():
    errs = errors({"components": [{"name": "outcome", "params": {"bta": 1}}]})
    assert errs[0][0] == "components.0.outcome.params.bta"


def test_it_rejects_an_unknown_component_name_listing_the_known_ones():
    ((loc, msg),) = errors({"components": [{"name": "vibes"}]})
    assert loc == "components.0" and "'fbeta'" in msg


def test_it_rejects_nan_and_inf_weights():
    assert errors({"components": [{"name": "outcome", "weight": float("nan")}]})
    assert errors({"components": [{"name": "outcome", "weight": float("inf")}]})


def test_it_is_frozen_and_forbids_extra_keys():
    cfg = default_reward_config("calc")
    with pytest.raises(ValidationError):
        cfg.judge_aggregate = "min"  # type: ignore[misc]
    assert errors({"components": [{"name": "outcome"}], "extra": 1})[0][0] == "extra"


def test_it_builds_components_from_typed_models_too():
    cfg = RewardConfig(
        components=[FBetaComponent(params=FBetaParams(beta=2.0), weight=0.5)]
    )
    assert cfg.components[0].params.beta == 2.0 and cfg.components[0].key == "fbeta"


def test_it_requires_distinct_labels_for_repeated_components():
    errs = errors({"components": [{"name": "fbeta"}, {"name": "fbeta"}]})
    assert "fbeta appear twice" in errs[0][1]
    RewardConfig.model_validate(
        {
            "components": [
                {"name": "fbeta"},
                {"name": "fbeta", "label": "f1", "params": {"beta": 1}},
            ]
        }
    )


def test_it_requires_a_judge_for_the_judge_component():
    errs = errors({"components": [{"name": "judge"}]})
    assert (
        "components.0.judge: a judge component needs at least one entry in judges"
        in errs[0][1]
    )


def test_it_rejects_a_judge_component_naming_a_missing_judge():
    data = {
        "components": [{"name": "judge", "params": {"judges": ["nope"]}}],
        "judges": [{"name": "rules", "rubric": RUBRIC}],
    }
    assert "no judge named 'nope'" in errors(data)[0][1]


def test_it_requires_model_path_for_hf_and_endpoint_for_openai():
    ((loc, msg),) = errors(
        {"name": "j", "backend": "hf", "rubric": RUBRIC}, JudgeConfig
    )
    assert loc == "model_path" and "hf backend needs model_path" in msg
    ((loc, msg),) = errors(
        {"name": "j", "backend": "openai", "rubric": RUBRIC}, JudgeConfig
    )
    assert loc == "endpoint" and "allow-list" in msg


def test_it_rejects_a_rubric_dimension_without_a_rule_based_check():
    ((loc, msg),) = errors(
        {"name": "j", "rubric": [{"name": "helpfulness"}]}, JudgeConfig
    )
    assert loc == "rubric" and "unknown rule-based check 'helpfulness'" in msg
    # Generative backends accept free-form dimensions; a rubric one can map via check.
    JudgeConfig(
        name="j", backend="hf", model_path="/m", rubric=[{"name": "helpfulness"}]
    )
    JudgeConfig(name="j", rubric=[{"name": "solved", "check": "success"}])


def test_it_rejects_a_rubric_with_all_zero_weights_or_duplicate_dimensions():
    assert errors(
        {"name": "j", "rubric": [{"name": "success", "weight": 0}]}, JudgeConfig
    )
    assert errors({"name": "j", "rubric": [{"name": "success"}] * 2}, JudgeConfig)


def test_it_rejects_a_linear_schedule_without_steps():
    ((loc, msg),) = errors({"kind": "linear", "steps": 0}, WeightSchedule)
    assert "needs steps >= 1" in msg


def test_it_rejects_unknown_detectors_and_thresholds():
    assert (
        "unknown detector 'vibes'"
        in errors({"enabled": ["vibes"]}, DetectorConfig)[0][1]
    )
    ((loc, msg),) = errors({"thresholds": {"serial_collapse.max": 1}}, DetectorConfig)
    assert loc == "thresholds" and "unknown threshold" in msg
    cfg = DetectorConfig(thresholds={"serial_collapse.max_parallelism": 1.5})
    assert cfg.threshold("serial_collapse.max_parallelism") == 1.5
    assert cfg.threshold("entropy_collapse.min_entropy") == 0.1


def test_it_keeps_schema_names_and_registries_in_step():
    assert sorted(COMPONENT_NAMES) == COMPONENTS.names()
    assert sorted(DETECTOR_NAMES) == DETECTORS.names()


@pytest.mark.parametrize("env", ["calc", "search", "swarm"])
def test_it_round_trips_each_default_through_json(env):
    cfg = default_reward_config(env)
    assert RewardConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_it_has_no_default_for_an_unknown_environment():
    with pytest.raises(KeyError, match="known: calc, search, swarm"):
        default_reward_config("chess")


def test_it_lists_the_two_swarm_demo_configs():
    assert demo_names() == ["swarm_serial_collapse", "swarm_spurious_parallelism"]
    collapse = {c.name: c for c in demo_config("swarm_serial_collapse").components}
    assert "r_parallel" not in collapse and collapse["r_perf"].params.budget == 0
    spurious = {
        c.name: c for c in demo_configs()["swarm_spurious_parallelism"].components
    }
    assert "r_finish" not in spurious and spurious["r_parallel"].weight == 1.0
    assert spurious["r_perf"].weight < 1.0
    with pytest.raises(KeyError, match="known"):
        demo_config("nope")
