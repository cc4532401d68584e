"""The reward configuration: which components, their weights and schedules, the judges.

Part of the run schema (``trainer.config.TrainConfig.reward``). Component parameters are
validated by each component's own parameter model, so an error names the field:
``reward.components.0.params.beta: Input should be greater than 0``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class WeightSchedule(_Strict):
    """How a component's weight moves with the training step.

    ``constant``: the weight as given. ``linear``: from the weight at step 0 to ``end``
    at step ``steps`` and flat after it (PARL anneals lambda_parallel/lambda_finish to 0).
    """

    kind: Literal["constant", "linear"] = "constant"
    end: float = Field(0.0, ge=-1000, le=1000)
    steps: int = Field(0, ge=0, le=10_000_000)


class ComponentConfig(_Strict):
    name: Literal[
        "outcome",
        "process",
        "fbeta",
        "trajectory_recall",
        "prune_penalty",
        "single_search_exit_penalty",
        "r_perf",
        "r_parallel",
        "r_finish",
        "judge",
        "format",
    ]
    weight: float = Field(1.0, ge=-1000, le=1000)
    params: dict[str, Any] = Field(default_factory=dict)
    schedule: WeightSchedule = Field(default_factory=WeightSchedule)
    label: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Name shown in metrics; defaults to the component name.",
    )


class RubricDimension(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    weight: float = Field(1.0, ge=0, le=1000)
    description: str = Field("", max_length=2000)


class JudgeConfig(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    backend: Literal["rubric", "hf", "openai"] = "rubric"
    rubric: list[RubricDimension] = Field(min_length=1, max_length=32)
    model_path: str | None = Field(None, max_length=1024, description="hf: local model dir.")
    endpoint: str | None = Field(
        None, max_length=64, description="openai: an endpoint name from the admin allow-list."
    )
    model: str | None = Field(None, max_length=200, description="openai: model name to ask for.")
    timeout_s: float = Field(30.0, gt=0, le=600)
    retries: int = Field(2, ge=0, le=10)
    max_tokens: int = Field(256, ge=1, le=8192)


class DetectorConfig(_Strict):
    """Reward-hacking detectors: which run, over how many recent steps."""

    enabled: list[str] | None = Field(None, description="None: every detector that applies.")
    window: int = Field(20, ge=2, le=10_000)
    thresholds: dict[str, float] = Field(default_factory=dict)


class RewardConfig(_Strict):
    components: list[ComponentConfig] = Field(min_length=1, max_length=32)
    judges: list[JudgeConfig] = Field(default_factory=list, max_length=16)
    judge_aggregate: Literal["mean", "min", "median"] = "mean"
    detectors: DetectorConfig = Field(default_factory=DetectorConfig)
