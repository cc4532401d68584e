"""The run configuration: one typed schema shared by the CLI, the JSON API and the form.

Every number is bounded, every name is an enum, unknown keys are rejected, and errors
name the field (``algorithm.clip_high: Input should be less than or equal to 10``).
Algorithm presets are data (:data:`trainer.algorithms.presets.PRESETS`); a field left
``None`` here takes the preset's value, any field set overrides it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rewards.config import RewardConfig
from trainer.config_algorithm import (  # noqa: F401  (re-exported)
    AlgorithmConfig,
    KlKind,
    LossName,
    PresetName,
    RolloutCorrectionConfig,
)
from trainer.config_base import _Strict
from trainer.config_rollout import RolloutConfig  # noqa: F401  (re-exported)
from trainer.recording_policy import RecordConfig


class LoraConfig(_Strict):
    """LoRA adapters (through ``peft``) on a pretrained model: only they are trained;
    the KL reference is the same model with the adapters disabled."""

    r: int = Field(8, ge=1, le=1024, description="Adapter rank.")
    alpha: float = Field(16.0, gt=0, le=4096, description="Scaling: alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[
        Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.]+$")]
    ] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        max_length=64,
        description="Names of the linear modules that get adapters.",
    )


class ModelConfig(_Strict):
    """The policy model."""

    path: str | None = Field(
        None,
        max_length=1024,
        description="Local Hugging Face model directory (loaded with local_files_only, "
        "no remote code). Empty: build the default small Llama-style model from a config.",
    )
    size: Literal["tiny", "small", "base", "large", "0.5b"] = Field(
        "tiny",
        description="Default-model size when no path is given: tiny ~1M, small ~4M, "
        "base ~10M, large ~120M, 0.5b ~0.5B parameters (large and 0.5b are for GPUs).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: CUDA if present."
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: bfloat16 on CUDA, float32 on CPU."
    )
    warmstart_steps: int = Field(
        0,
        ge=0,
        le=10_000,
        description="Behaviour-cloning steps on random valid actions before RL, so a "
        "from-scratch model knows the action grammar (not which action is good).",
    )
    warmstart_lr: float = Field(3e-3, gt=0, le=1)
    warmstart_batch: int = Field(
        32, ge=1, le=1024, description="Scripted episodes per warm-start step."
    )
    lora: LoraConfig | None = Field(
        None, description="Train LoRA adapters instead of every weight (needs path)."
    )
    init_from_run: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9-]+$",
        description="Start from the weights (not the optimizer or step) of this run's "
        "newest checkpoint; the same model settings. On the platform: a run id.",
    )

    @model_validator(mode="after")
    def _lora_needs_path(self) -> ModelConfig:
        if self.lora is not None and not self.path:
            raise ValueError(
                "lora: LoRA adapters need a pretrained model directory (model.path)"
            )
        return self


def _env_tag(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("name", "calc"))
    return str(getattr(value, "name", "calc"))


_ENV_MODELS: dict[str, type[BaseModel]] = {}


def _env_config_models() -> dict[str, type[BaseModel]]:
    """One ``{name, params}`` model per registered environment, its ``params`` typed
    by the environment's own ``Params`` (required when that model has a required
    field): adding an environment touches its own module only."""
    import trainer.envs  # noqa: F401  (registers the built-in environments)
    from trainer.envs.base import ENVIRONMENTS

    for name in ENVIRONMENTS.names():
        params = ENVIRONMENTS.get(name).Params
        old = _ENV_MODELS.get(name)
        if old is not None and old.model_fields["params"].annotation is params:
            continue
        required = any(f.is_required() for f in params.model_fields.values())
        _ENV_MODELS[name] = create_model(
            f"{name.title().replace('_', '')}EnvConfig",
            __base__=_Strict,
            __doc__=(ENVIRONMENTS.get(name).__doc__ or name).strip(),
            name=(Literal[name], name),
            params=(params, ... if required else Field(default_factory=params)),
        )
    return {n: _ENV_MODELS[n] for n in ENVIRONMENTS.names()}


def _env_union(models: dict[str, type[BaseModel]]) -> Any:
    return Union[tuple(Annotated[m, Tag(n)] for n, m in models.items())]  # noqa: UP007


ENV_CONFIGS = _env_config_models()
ENV_NAMES: tuple[str, ...] = tuple(ENV_CONFIGS)
CalcEnvConfig = ENV_CONFIGS["calc"]
# Tagged by name, so an error names the environment and field:
# ``env.search.params.context_budget: Input should be greater than or equal to 1``.
EnvConfig = Annotated[_env_union(ENV_CONFIGS), Discriminator(_env_tag)]


# The registries are the single source of names: a new preset or loss appears here.
class OptimConfig(_Strict):
    """AdamW and the update schedule."""

    lr: float = Field(
        1e-3,
        gt=0,
        le=1,
        description="AdamW's learning rate. Fine-tuning "
        "a pretrained chat model usually wants 1e-6 to 1e-5; the built-in small "
        "models train from scratch at 1e-3.",
    )
    weight_decay: float = Field(
        0.0,
        ge=0,
        le=1,
        description="AdamW's decoupled weight decay (0: none, as TRL's default).",
    )
    beta1: float = Field(
        0.9, ge=0, lt=1, description="AdamW's decay rate of the gradient's mean."
    )
    beta2: float = Field(
        0.999,
        ge=0,
        lt=1,
        description="AdamW's decay rate of the squared gradient's mean (0.95-0.999).",
    )
    grad_clip: float = Field(
        1.0,
        gt=0,
        le=1e6,
        description="The gradient's global norm is clipped to this before each step "
        "(grad_norm in the charts is the norm before clipping).",
    )
    epochs: int = Field(
        1, ge=1, le=64, description="Optimisation epochs over each batch."
    )
    minibatches: int = Field(1, ge=1, le=1024, description="Minibatches per epoch.")
    micro_batch_size: int = Field(
        0,
        ge=0,
        le=65536,
        description="Rollouts per forward and backward within a minibatch "
        "(gradient accumulation: the same update, one micro-batch's activations "
        "in memory at a time); 0: the whole minibatch at once.",
    )
    micro_batch_tokens: int = Field(
        0,
        ge=0,
        le=2**26,
        description="Tokens per forward and backward within a minibatch at most, "
        "counted as a micro-batch's rollouts times its longest (a token budget: "
        "rollouts of about the same length go together, more of the short ones; "
        "verl's ppo_max_token_len_per_gpu); a longer rollout goes alone. 0: no "
        "limit. With micro_batch_size, both hold.",
    )
    fused_head: bool = Field(
        True,
        description="Take log-probs and entropies from the final hidden states a "
        "chunk of tokens at a time (the language-model head, softmax and entropy "
        "never held for the whole batch, the head's product done again in the "
        "backward) instead of from the model's logits: the update's memory for "
        "large vocabularies. Models whose logits are not a plain linear head of "
        "the last hidden state, and FSDP, use their logits.",
    )
    master_weights: bool = Field(
        True,
        description="Weights held in bfloat16 (model.dtype; the default on CUDA) are "
        "stepped as float32 copies with float32 moments and rounded into the model "
        "after each step (8 more bytes a trainable parameter). Off: AdamW steps the "
        "bfloat16 weights themselves, and an update under half a bfloat16 step is "
        "lost (at lr 1e-6 most of a pretrained model's weights never move). No "
        "effect on float32 weights.",
    )
    compile: bool = Field(
        False,
        description="torch.compile each decoder layer's MLP and norms for the "
        "update's forward and backward (fused elementwise kernels, for GPUs; the "
        "first step pays for compilation). Falls back to eager with the reason "
        "logged.",
    )


class CheckpointConfig(_Strict):
    """Checkpoints of a run that has somewhere to write them (the platform's
    ``RUNS_DIR``, the CLI's ``--out``): every ``every`` steps and always after the
    last step, so every run keeps its model; the newest ``keep`` stay on disk."""

    every: int = Field(
        50,
        ge=0,
        le=1_000_000,
        description="Steps between checkpoints; 0: only the last step's.",
    )
    keep: int = Field(2, ge=1, le=1000, description="Checkpoints kept on disk.")


class EvalConfig(_Strict):
    """Evaluation on held-out tasks every ``every`` steps (the ``dataset`` environment's
    held-out split; a generator's own seeded stream of tasks): metrics ``eval/reward``
    and ``eval/pass@k`` (k = ``samples``) in that step's event."""

    every: int = Field(
        0, ge=0, le=1_000_000, description="Steps between evaluations; 0: off."
    )
    tasks: int = Field(8, ge=1, le=4096, description="Held-out tasks per evaluation.")
    samples: int = Field(
        1, ge=1, le=256, description="Rollouts per task: the k of pass@k."
    )
    greedy: bool = Field(
        False, description="Greedy decoding; off: sample at rollout.temperature."
    )


class ResourcesConfig(_Strict):
    """How many processes train the run together (``torch.distributed``, launched with
    ``torchrun``): each takes its share of a step's task groups. With ``ddp`` every
    process holds the whole model and gradients are all-reduced; with ``fsdp``
    (FSDP2) parameters, gradients and optimizer state are sharded across them. One
    process: today's single-device run."""

    processes: int = Field(
        1,
        ge=1,
        le=1024,
        description="Training processes (one per device); at most "
        "rollout.tasks_per_step, since a group never spans processes.",
    )
    strategy: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="ddp: every process holds the whole model, gradients are "
        "all-reduced (DistributedDataParallel). fsdp: FSDP2 fully_shard, "
        "parameters, gradients and optimizer state sharded across the processes, "
        "for models that do not fit on one device.",
    )


class TrainConfig(_Strict):
    """A whole run. ``reward`` is built into a reward function by ``rewards``; the
    trainer itself only receives that function."""

    name: str = Field("run", min_length=1, max_length=200)
    seed: int = Field(0, ge=0, le=2**31 - 1, strict=True)  # true is not 1
    steps: int = Field(50, ge=1, le=1_000_000)
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=CalcEnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    record: RecordConfig = Field(
        default_factory=RecordConfig,
        description="Which trajectories are stored (trainer.recording_policy).",
    )
    reward: RewardConfig | None = Field(
        None,
        description="Reward components and judges; null or left out: the "
        "environment's default.",
    )
    resources: ResourcesConfig = Field(
        default_factory=ResourcesConfig,
        description="Processes (devices) that train the run together.",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _env_is_known(cls, value: Any) -> Any:
        """An environment this server does not have, refused as ``env.name`` with
        the names it has (pydantic's own message names the tag function)."""
        if not isinstance(value, dict):
            return value
        name = value.get("name", "calc")
        if isinstance(name, str) and name in ENV_NAMES:
            return value
        shown = repr(name) if len(repr(name)) <= 64 else repr(name)[:60] + "...'"
        error = PydanticCustomError(
            "env_name",
            "{given} is not an environment of this server; choose one of: {names}",
            {"given": shown, "names": ", ".join(ENV_NAMES)},
        )
        raise ValidationError.from_exception_data(
            "env", [{"type": error, "loc": ("name",), "input": name}]
        )

    @model_validator(mode="after")
    def _algorithm_resolves(self) -> TrainConfig:
        from trainer.algorithms import resolve_algorithm

        try:
            resolve_algorithm(self.algorithm)
        except ValueError as exc:
            # One "field: message" line per field the conflict names, so that the
            # API's error list and the form file it under each of them.
            msg = str(exc)
            names = dict.fromkeys(re.findall(r"algorithm\.[a-z_]+", msg))
            raise ValueError("\n".join(f"{n}: {msg}" for n in names) or msg) from None
        return self

    @model_validator(mode="after")
    def _resources_fit(self) -> TrainConfig:
        n = self.resources.processes
        if n > 1 and n > self.rollout.tasks_per_step:
            # A group never spans processes: each needs at least one task a step.
            raise ValueError(
                f"resources.processes: {n} processes need at least {n} tasks a "
                f"step, rollout.tasks_per_step is {self.rollout.tasks_per_step}"
            )
        return self

    @model_validator(mode="after")
    def _engine_options_fit(self) -> TrainConfig:
        from trainer.engines import ENGINES

        r = self.rollout
        if getattr(ENGINES.get(r.engine), "continuous", False):
            return self
        set_ = [
            f"rollout.{name}: applies to rollout.engine: continuous only (the "
            f"{r.engine} engine plays every turn in lock-step); set it to 0 or "
            "choose the continuous engine"
            for name in ("env_workers", "max_live_episodes")
            if getattr(r, name)
        ]
        if set_:
            raise ValueError("\n".join(set_))
        return self

    @model_validator(mode="after")
    def _fsdp_without_lora(self) -> TrainConfig:
        if self.resources.strategy == "fsdp" and self.model.lora is not None:
            # LoRA trains a few adapters on a frozen base: ddp already keeps only
            # them in the optimizer, and the adapter's peft files are written from
            # unsharded weights.
            raise ValueError(
                "resources.strategy: fsdp does not train LoRA adapters (model.lora); "
                "use strategy ddp"
            )
        return self

    @model_validator(mode="after")
    def _reward_fits_env(self) -> TrainConfig:
        if self.reward is not None:
            from rewards import check_reward_config

            problems = check_reward_config(self.reward, self.env.name)
            if problems:
                # One line per problem, each starting with its field path; format_errors
                # splits them back into separate errors.
                raise ValueError("\n".join(f"reward.{p}" for p in problems))
        return self


SCHEMA_VERSION = 0  # bumped by refresh_schema(); readers may cache per version


def refresh_schema() -> None:
    """Rebuild the run schema from the registries: environments, reward components,
    judge backends. Called after plugins registered more (:mod:`trainer.plugins`);
    the form and ``/api/config/schema`` read the rebuilt models."""
    global ENV_CONFIGS, ENV_NAMES, SCHEMA_VERSION
    from rewards import refresh_schema as refresh_rewards

    refresh_rewards()
    ENV_CONFIGS = _env_config_models()
    ENV_NAMES = tuple(ENV_CONFIGS)
    TrainConfig.model_fields["env"].annotation = _env_union(ENV_CONFIGS)
    TrainConfig.model_rebuild(force=True)
    SCHEMA_VERSION += 1


def clean_error_message(msg: str) -> str:
    """Pydantic's message without the "Value error, " / "Assertion failed, " prefix
    it adds to errors raised inside validators."""
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def format_errors(exc: Exception) -> list[str]:
    """``field.path: message`` lines for a pydantic ValidationError (or any error)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        out = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            msg = clean_error_message(str(err["msg"]))
            if not loc and ": " in msg:  # a whole-config check that names its fields
                out.extend(line for line in msg.splitlines() if line)
                continue
            out.append(f"{loc or '(config)'}: {msg}")
        return out
    return [f"(config): {exc}"]
