"""Rewards: composable components with per-step attribution, critical steps and PARL,
recall-first search rewards, multi-judge generative reward models, and reward-hacking
detectors. Pure Python (+ torch/transformers for the local judge); never Django.

The trainer receives ``build_reward_fn(cfg, env_name=...)`` as a callable and, if it
wants alerts, ``build_monitor(cfg, env_name=...)``.
"""

from __future__ import annotations

from rewards import (  # noqa: F401  (register the components)
    detectors_health,  # noqa: F401  (register its detectors)
    detectors_search,  # noqa: F401  (register its detectors)
    matching,
    parl,
    search,
)
from rewards.combine import build_reward_fn, check_reward_config
from rewards.components import COMPONENTS
from rewards.config import (
    ComponentConfig,
    DetectorConfig,
    JudgeConfig,
    RewardConfig,
    RubricDimension,
    WeightSchedule,
    refresh_schema,
)
from rewards.detectors import DETECTORS
from rewards.judges import JUDGE_BACKENDS, EndpointSpec
from rewards.monitor import build_monitor
from rewards.parl import critical_path, critical_steps, stages_from_facts
from rewards.presets import (
    default_reward_config,
    demo_config,
    demo_configs,
    demo_names,
    with_overlong_penalty,
)
from rewards.search import fbeta

# Every built-in component and judge backend is registered by now: build the schema.
refresh_schema()

__all__ = [
    "COMPONENTS",
    "DETECTORS",
    "JUDGE_BACKENDS",
    "ComponentConfig",
    "DetectorConfig",
    "EndpointSpec",
    "JudgeConfig",
    "RewardConfig",
    "RubricDimension",
    "WeightSchedule",
    "build_monitor",
    "build_reward_fn",
    "check_reward_config",
    "critical_path",
    "critical_steps",
    "default_reward_config",
    "demo_config",
    "demo_configs",
    "demo_names",
    "fbeta",
    "refresh_schema",
    "stages_from_facts",
    "with_overlong_penalty",
]
