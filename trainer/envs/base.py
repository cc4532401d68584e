"""The environment contract: tasks, sessions, steps and the facts they report.

An environment owns its own facts (what a task is, what a tool does, what counts as
success) and reports them as :class:`rewards.types.StepFacts` / :class:`Episode`; it
never computes rewards (``rewards/`` turns facts into rewards). Environments are
seeded and deterministic: the same seed and the same actions give the same episode.

Text protocol (shared with the tokenizer the project builds): prompts, actions and
observations are whitespace-separated words drawn from :meth:`Environment.vocabulary`,
so a word-level tokenizer round-trips them exactly. An action is what the policy writes
before the end-of-action token; the environment parses it and never raises on a
malformed one (it returns ``ok=False`` facts and an error observation).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rewards.registry import Registry
from rewards.types import Episode, StepFacts

if TYPE_CHECKING:
    from rewards.config import RewardConfig

ENVIRONMENTS: Registry[type[Environment]] = Registry("environment")


class EnvParams(BaseModel):
    """Base of every environment's parameter model: unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Task:
    """One problem. ``payload`` is environment-private (gold documents, the answer...).

    ``messages``: the prompt as chat messages (``{"role", "content"}``, system and
    user turns) for a chat-template model; empty: one user message, ``prompt``."""

    id: str
    prompt: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    messages: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class StepResult:
    """What the environment answers to one action.

    ``observation_kind`` is the loss-mask reason of the observation's tokens:
    ``"tool"`` for tool output, ``"subagent"`` for frozen sub-agent output.
    """

    observation: str
    done: bool
    facts: StepFacts
    observation_kind: str = "tool"


class EnvSession(ABC):
    """One episode in progress. Created by :meth:`Environment.start`."""

    task: Task

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action (already decoded, without the end-of-action token)."""

    @abstractmethod
    def episode(self, *, truncated: bool) -> Episode:
        """The finished episode's facts. ``truncated``: stopped by a budget, not by
        the policy; such an episode never counts as a success."""

    @abstractmethod
    def random_action(self, rng: random.Random) -> str:
        """A well-formed (not necessarily good) action for the current state: used to
        warm-start a from-scratch model on the action grammar."""


class Environment(ABC):
    """A registered, seeded task family with tools. Subclasses set ``name``/``Params``."""

    name: ClassVar[str]
    label: ClassVar[str] = ""  # a few words for the form; default: the docstring's
    Params: ClassVar[type[EnvParams]] = EnvParams
    # The reward a run gets when its config names none (a RewardConfig dict); None:
    # the built-in default of rewards.presets.
    default_reward: ClassVar[Mapping[str, Any] | None] = None
    # True: sessions share no mutable state, so the continuous rollout
    # (``rollout.engine: continuous``) may run several sessions' ``step`` at once on
    # worker threads (one call per session at a time). False (the default, e.g. a
    # plugin's environment): every step runs on the decode thread.
    steps_in_threads: bool = False
    # True: episodes fan out to sub-agents and carry a ``stages`` fact (the reward's
    # critical path, the run page's "Critical steps and parallelism" chart). A
    # plugin's environment that reports stages sets it; the chart draws whatever
    # arrives either way, the flag only says, while it is empty, why.
    orchestrates: ClassVar[bool] = False

    def __init__(
        self, params: EnvParams | Mapping[str, Any] | None = None, *, seed: int = 0
    ):
        if params is None or isinstance(params, Mapping):
            params = self.Params.model_validate(dict(params or {}))
        self.params = params
        self.seed = seed

    @abstractmethod
    def vocabulary(self) -> list[str]:
        """Every word that can appear in a prompt, an action or an observation."""

    @abstractmethod
    def sample_tasks(self, n: int, rng: random.Random) -> list[Task]:
        """``n`` tasks drawn with ``rng`` (the trainer owns the generator)."""

    @abstractmethod
    def start(self, task: Task) -> EnvSession:
        """Begin an episode of ``task``."""

    def held_out_tasks(self, n: int, rng: random.Random) -> list[Task]:
        """``n`` evaluation tasks. A generator of tasks draws them from its own
        stream (the caller's ``rng``, seeded apart from training's); an environment
        with a fixed set of tasks (``dataset``) draws from its held-out split."""
        return self.sample_tasks(n, rng)


def default_reward_for(name: str) -> RewardConfig:
    """The reward of a run on environment ``name`` whose config names none: the
    environment's own ``default_reward``, else :func:`rewards.default_reward_config`."""
    import trainer.envs  # noqa: F401  (registers the built-ins)
    from rewards import RewardConfig, default_reward_config

    own = ENVIRONMENTS.get(name).default_reward
    if own is not None:
        return RewardConfig.model_validate(dict(own))
    return default_reward_config(name)


def make_env(
    name: str, params: Mapping[str, Any] | None = None, *, seed: int = 0
) -> Environment:
    """Build a registered environment by name (imports the built-in ones first)."""
    import trainer.envs  # noqa: F401  (registers the built-ins)

    return ENVIRONMENTS.get(name)(params, seed=seed)
