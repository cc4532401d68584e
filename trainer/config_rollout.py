"""The rollout section of the training config: how experience is sampled (tasks and
group sizes, turn and token budgets, sampling, the rollout engine and its options).
Re-exported by :mod:`trainer.config`."""

from __future__ import annotations

from pydantic import Field, field_validator

from trainer.config_base import _Strict


class RolloutConfig(_Strict):
    """How experience is sampled."""

    tasks_per_step: int = Field(
        4, ge=1, le=4096, description="Distinct tasks per batch."
    )
    group_size: int = Field(4, ge=2, le=256, description="Rollouts per task (G).")
    max_turns: int = Field(
        6,
        ge=1,
        le=64,
        description="Agent steps before truncation. An environment's own limit "
        "(the dataset environment's max turns) ends an episode first when it is "
        "smaller: the smaller of the two bounds an episode.",
    )
    max_action_tokens: int = Field(12, ge=1, le=4096, description="Tokens per action.")
    max_total_tokens: int = Field(
        512, ge=16, le=131072, description="Whole-trajectory budget."
    )
    temperature: float = Field(1.0, gt=0, le=5)
    top_p: float = Field(1.0, gt=0, le=1)
    engine: str = Field(
        "eager",
        min_length=1,
        max_length=64,
        description="Rollout engine (trainer.engines): eager, compiled (a static "
        "KV cache and a torch.compile'd decode step on CUDA; uncompiled on the CPU), "
        "continuous (episodes rejoin the decode batch as their tool calls return, "
        "each keeping its KV cache across turns; per-episode random streams), "
        "reference (the plain loop, for comparison) or one a plugin registered.",
    )

    env_workers: int = Field(
        0,
        ge=0,
        le=256,
        description="rollout.engine continuous: threads that step the environments "
        "(their tool calls) while the other episodes decode; 0: on the decode thread "
        "(the built-in environments step in microseconds). For an environment whose "
        "steps wait (a sandbox, a network call) and are thread-safe "
        "(steps_in_threads); others always step on the decode thread. The episodes "
        "and their tokens do not change.",
    )
    max_live_episodes: int = Field(
        0,
        ge=0,
        le=65536,
        description="rollout.engine continuous: episodes in the decode batch at most "
        "(vLLM's max_num_seqs); the next begins as one ends. 0: all of the step's at "
        "once. Fewer hold less KV cache; the episodes and their tokens do not change.",
    )

    @field_validator("engine")
    @classmethod
    def _registered_engine(cls, name: str) -> str:
        from trainer.engines import ENGINES

        if name not in ENGINES:
            known = ", ".join(ENGINES.names())
            raise ValueError(f"unknown rollout engine {name!r} (known: {known})")
        return name
