"""The reward configuration: which components, their weights and schedules, the judges.

Part of the run schema (``trainer.config.TrainConfig.reward``). A component is a
discriminated union on ``name``: each component has its own typed ``params`` model
(:mod:`rewards.params`), so an error names the field path, e.g.
``reward.components.0.fbeta.params.beta: Input should be greater than 0``. Judges are
validated per backend (``hf`` needs ``model_path``, ``openai`` an ``endpoint`` name from
the admin allow-list; ``rubric`` dimensions must name a known deterministic check).

This module only describes; :func:`rewards.build_reward_fn` turns it into a function.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

_NAME = r"^[A-Za-z0-9_.-]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class WeightSchedule(_Strict):
    """How a component's weight moves with the training step.

    ``constant``: the weight as given. ``linear``: from the weight at step 0 to ``end``
    at step ``steps`` and flat after it (PARL anneals lambda_parallel/lambda_finish to 0
    so the final policy optimises r_perf alone; Kimi K2.5).
    """

    kind: Literal["constant", "linear"] = "constant"
    end: float = Field(0.0, ge=-1000, le=1000)
    steps: int = Field(0, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _linear_needs_steps(self) -> WeightSchedule:
        if self.kind == "linear" and self.steps < 1:
            raise ValueError("steps: a linear schedule needs steps >= 1")
        return self


class _ComponentBase(_Strict):
    name: str  # each subclass narrows it to its own literal (the union's tag)
    weight: float = Field(1.0, ge=-1000, le=1000)
    schedule: WeightSchedule = Field(default_factory=WeightSchedule)
    label: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=_NAME,
        description="Name shown in metrics; defaults to the component name.",
    )

    @property
    def key(self) -> str:
        """The component's name in results and metrics (``rewards/<key>/mean``)."""
        return self.label or self.name


_COMPONENT_MODELS: dict[str, type[_ComponentBase]] = {}


def _component_model(
    name: str, params: type[BaseModel], doc: str
) -> type[_ComponentBase]:
    """``{name, weight, schedule, label, params}`` for one registered component, its
    ``params`` typed by the model registered beside the function (``FBetaParams`` ->
    ``FBetaComponent``)."""
    cls_name = params.__name__.removesuffix("Params") or name.title()
    if any(m.__name__ == f"{cls_name}Component" for m in _COMPONENT_MODELS.values()):
        cls_name = "".join(p.title() for p in name.split("_"))  # params shared
    required = any(f.is_required() for f in params.model_fields.values())
    model = create_model(
        f"{cls_name}Component",
        __base__=_ComponentBase,
        __doc__=(doc.strip().split("\n\n")[0] or name),
        __module__=__name__,
        name=(Literal[name], name),
        params=(params, ... if required else Field(default_factory=params)),
    )
    return model


def component_models() -> dict[str, type[_ComponentBase]]:
    """One config model per registered reward component, in registration order.

    Built from :data:`rewards.components.COMPONENTS`; a model is made once per name,
    so ``FBetaComponent`` stays the same class across :func:`refresh_schema` calls.
    """
    from rewards.components import COMPONENTS

    for name in COMPONENTS.in_order():
        spec = COMPONENTS.get(name)
        old = _COMPONENT_MODELS.get(name)
        if old is None or old.model_fields["params"].annotation is not spec.params:
            _COMPONENT_MODELS[name] = _component_model(name, spec.params, spec.doc)
    return {n: _COMPONENT_MODELS[n] for n in COMPONENTS.in_order()}


# Filled from the registries by refresh_schema() (rewards/__init__ calls it once every
# built-in component and judge backend is registered; trainer.plugins after plugins).
ComponentConfig: Any = Any
"""One weighted component: ``{"name", "weight", "params", "schedule", "label"}``."""
COMPONENT_NAMES: tuple[str, ...] = ()


def __getattr__(attr: str) -> Any:
    # ``from rewards.config import FBetaComponent``: the models built from the registry.
    for model in _COMPONENT_MODELS.values():
        if model.__name__ == attr:
            return model
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


class RubricDimension(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=_NAME)
    weight: float = Field(1.0, ge=0, le=1000)
    description: str = Field("", max_length=2000)
    check: str | None = Field(
        None,
        max_length=64,
        pattern=_NAME,
        description="rubric backend: the deterministic check to run (defaults to name).",
    )


class JudgeConfig(_Strict):
    """One generative reward model and its rubric (Kimi-style GRM; several judges with
    different rubrics make a single judge harder to game)."""

    name: str = Field(min_length=1, max_length=64, pattern=_NAME)
    backend: str = Field(
        "rubric", description="A registered judge backend (rubric, hf, openai, ...)."
    )
    rubric: list[RubricDimension] = Field(min_length=1, max_length=32)
    model_path: str | None = Field(
        None, max_length=1024, validate_default=True, description="hf: local model dir."
    )
    endpoint: str | None = Field(
        None,
        max_length=64,
        validate_default=True,
        description="openai: an endpoint name from the admin allow-list.",
    )
    model: str | None = Field(
        None,
        max_length=200,
        description="openai: model name (default: the endpoint's).",
    )
    timeout_s: float = Field(30.0, gt=0, le=600)
    retries: int = Field(2, ge=0, le=10)
    max_tokens: int = Field(256, ge=1, le=8192)
    scale: float = Field(
        10.0, gt=0, le=1000, description="hf/openai: scores are 0..scale."
    )

    @field_validator("rubric")
    @classmethod
    def _rubric_ok(cls, v: list[RubricDimension], info: ValidationInfo) -> Any:
        names = [d.name for d in v]
        if len(set(names)) != len(names):
            raise ValueError("dimension names must be unique")
        if sum(d.weight for d in v) <= 0:
            raise ValueError("at least one dimension needs a weight > 0")
        if info.data.get("backend") == "rubric":
            from rewards.judges.checks import RUBRIC_CHECKS

            for d in v:
                if (d.check or d.name) not in RUBRIC_CHECKS:
                    known = ", ".join(RUBRIC_CHECKS.names())
                    raise ValueError(
                        f"{d.name}: unknown rule-based check {d.check or d.name!r} "
                        f"(known: {known})"
                    )
        return v

    @field_validator("model_path")
    @classmethod
    def _hf_needs_path(cls, v: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("backend") == "hf" and not v:
            raise ValueError(
                "the hf backend needs model_path (a local model directory)"
            )
        return v

    @field_validator("endpoint")
    @classmethod
    def _openai_needs_endpoint(cls, v: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("backend") == "openai" and not v:
            raise ValueError(
                "the openai backend needs endpoint (a name from the allow-list)"
            )
        return v


# "<detector>.<threshold>": default. Documented with each detector in rewards.detectors.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "serial_collapse.max_parallelism": 1.2,
    "serial_collapse.min_parallelism": 0.5,
    "serial_collapse.min_fall": 0.3,
    "serial_collapse.min_serial_share": 0.5,
    "serial_collapse.after_windows": 2.0,
    "spurious_parallelism.min_parallelism": 2.0,
    "spurious_parallelism.max_finish_rate": 0.4,
    "spurious_parallelism.max_yield": 0.35,
    "spurious_parallelism.min_critical_drop": 0.1,
    "spurious_parallelism.min_proxy_reward": 0.1,
    "single_search_exit.min_frac": 0.5,
    "single_search_exit.min_rise": 0.2,
    "single_search_exit.after_windows": 2.0,
    "one_at_a_time_pruning.min_single_frac": 0.8,
    "one_at_a_time_pruning.min_prunes": 2.0,
    "one_at_a_time_pruning.min_episode_share": 0.5,
    "one_at_a_time_pruning.min_rise": 0.2,
    "one_at_a_time_pruning.after_windows": 2.0,
    "judge_verifier_divergence.min_judge_rise": 0.1,
    "judge_verifier_divergence.max_outcome_rise": 0.02,
    "length_drift.max_growth": 1.5,
    "length_drift.max_truncated": 0.3,
    "length_drift.min_truncated_rise": 0.2,
    "length_drift.after_windows": 2.0,
    "length_drift.min_success_gain": 0.05,
    "entropy_collapse.min_entropy": 0.1,
    "entropy_collapse.max_ratio": 0.25,
    "entropy_collapse.min_success_gain": 0.05,
    "no_learning_signal.min_frac": 0.95,
    "no_learning_signal.min_steps": 8.0,
    "reward_without_success.min_reward_rise": 0.1,
    "reward_without_success.max_outcome_rise": 0.02,
    "reward_without_success.max_outcome_share": 0.25,
    "shortcut.max_ratio": 0.67,
    "shortcut.max_outcome_rise": 0.02,
    "shortcut.min_separation": 2.0,
    "shortcut.min_proxy_share": 0.9,
    "repetition.max_repetition": 0.25,
    "repetition.min_rise": 0.2,
    "repetition.min_proxy_rise": 0.1,
}
DETECTOR_NAMES: tuple[str, ...] = tuple(
    dict.fromkeys(k.split(".")[0] for k in DEFAULT_THRESHOLDS)
)


class DetectorConfig(_Strict):
    """Reward-hacking detectors: which run, over how many recent steps."""

    enabled: list[str] | None = Field(
        None, description="None: every detector that applies."
    )
    window: int = Field(20, ge=2, le=10_000)
    min_steps: int = Field(
        4,
        ge=2,
        le=10_000,
        description="Steps of data a detector needs before it judges.",
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="Overrides of DEFAULT_THRESHOLDS, keyed '<detector>.<threshold>'.",
    )

    @field_validator("enabled")
    @classmethod
    def _known_detectors(cls, v: list[str] | None) -> list[str] | None:
        for name in v or []:
            if name not in DETECTOR_NAMES:
                raise ValueError(
                    f"unknown detector {name!r} (known: {', '.join(DETECTOR_NAMES)})"
                )
        return v

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(cls, v: dict[str, float]) -> dict[str, float]:
        for key in v:
            if key not in DEFAULT_THRESHOLDS:
                raise ValueError(
                    f"unknown threshold {key!r} (known: {', '.join(DEFAULT_THRESHOLDS)})"
                )
        return v

    @model_validator(mode="after")
    def _window_holds_min_steps(self) -> DetectorConfig:
        if self.min_steps > self.window:
            raise ValueError("min_steps: must not exceed window")
        return self

    def threshold(self, key: str) -> float:
        return self.thresholds.get(key, DEFAULT_THRESHOLDS[key])


class RewardConfig(_Strict):
    """``R = sum_i w_i(step) * component_i``, plus the judges the judge component uses.

    Judges run whenever they are configured; without a ``judge`` component they only
    report (judgements, ``judge/*`` metrics, the judge-vs-verifier detector).
    """

    components: list[Any] = Field(min_length=1, max_length=32)  # see refresh_schema
    judges: list[JudgeConfig] = Field(default_factory=list, max_length=16)
    judge_aggregate: Literal["mean", "min", "median"] = "mean"
    detectors: DetectorConfig = Field(default_factory=DetectorConfig)

    @model_validator(mode="after")
    def _consistent(self) -> RewardConfig:
        keys = [c.key for c in self.components]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(
                f"components: {', '.join(dup)} appear twice; give one a distinct label"
            )
        judge_names = [j.name for j in self.judges]
        if len(set(judge_names)) != len(judge_names):
            raise ValueError("judges: judge names must be unique")
        for i, c in enumerate(self.components):
            if c.name != "judge":
                continue
            if not self.judges:
                raise ValueError(
                    f"components.{i}.judge: a judge component needs at least one "
                    "entry in judges"
                )
            for name in c.params.judges or []:
                if name not in judge_names:
                    raise ValueError(
                        f"components.{i}.judge.params.judges: no judge named {name!r}"
                    )
        return self


def refresh_schema() -> None:
    """Build the component union and the judge-backend enum from the registries and
    rebuild the models that hold them. Call again after registering more (plugins);
    models that nest :class:`RewardConfig` must be rebuilt after it."""
    global ComponentConfig, COMPONENT_NAMES
    from rewards.registry import JUDGE_BACKENDS

    models = component_models()
    ComponentConfig = Annotated[
        Union[tuple(models.values())],  # noqa: UP007  (a runtime-built union)
        Field(discriminator="name"),
    ]
    COMPONENT_NAMES = tuple(models)
    backends = tuple(JUDGE_BACKENDS.in_order())
    JudgeConfig.model_fields["backend"].annotation = Literal[backends]  # type: ignore[assignment]
    RewardConfig.model_fields["components"].annotation = list[ComponentConfig]  # type: ignore[assignment]
    JudgeConfig.model_rebuild(force=True)
    RewardConfig.model_rebuild(force=True)
