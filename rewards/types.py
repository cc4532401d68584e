"""The vocabulary shared by environments and rewards: what happened, and what it was worth.

Environments (in ``trainer/envs``) describe each episode as an :class:`Episode` made of
:class:`StepFacts`; reward components read those facts and return a
:class:`RewardResult`. Nothing here knows about tensors, tokens, Django or Celery.

Conventions every environment follows so rewards stay generic:

* ``StepFacts.facts`` holds per-step facts (JSON-serialisable), e.g. for ``search``
  ``{"surfaced_gold": [...], "retained": [...], "pruned": [...]}``.
* ``Episode.facts`` holds trajectory-level facts (JSON-serialisable). Keys used across
  environments: ``success`` (bool), ``partial`` (float in [0, 1], optional),
  ``truncated`` (bool: stopped by a step or token budget), and for orchestration
  environments ``stages`` (see :func:`rewards.parl.critical_steps`) plus
  ``subtasks_assigned`` / ``subtasks_completed`` (ints).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class StepFacts:
    """One agent step: the action the policy wrote and what the environment made of it.

    ``tool`` is the parsed tool name (``"search"``, ``"answer"``, ``"spawn"``...) or
    ``None`` when the action could not be parsed; ``ok`` is False for a malformed or
    failed tool call (recorded, never raised).
    """

    index: int
    action: str
    tool: str | None
    ok: bool
    observation: str
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Episode:
    """One finished rollout of one task: the input every reward component reads."""

    task_id: str
    env: str
    prompt: str
    steps: tuple[StepFacts, ...]
    facts: Mapping[str, Any] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class RewardBreakdown:
    """A total reward split by component and by step.

    ``per_step[name]`` has one entry per step of the episode (``len == num_steps``;
    an episode with no steps gets a single pseudo-step so outcome rewards still land
    somewhere). ``sum(per_step[name]) == components[name]`` and
    ``sum(components.values()) == total`` up to float rounding; components are already
    multiplied by their weight.
    """

    total: float
    components: Mapping[str, float]
    per_step: Mapping[str, tuple[float, ...]]


@dataclass(frozen=True)
class Judgement:
    """What one generative reward model (judge) said about one episode.

    ``ok`` is False when the judge failed (timeout, unparseable output...): then
    ``score`` is None, ``error`` says why and ``raw`` keeps the judge's raw text.
    ``target_step`` names the step the rationale is about, when it is about one.
    """

    judge: str
    backend: str
    ok: bool
    score: float | None
    scores: Mapping[str, float]
    rationale: str
    raw: str | None = None
    error: str | None = None
    target_step: int | None = None


@dataclass(frozen=True)
class RewardResult:
    """Everything the reward function says about one episode.

    ``metrics`` are extra scalars the trainer averages over the batch and logs as
    ``<name>/mean`` (e.g. ``critical_steps``, ``parallelism``, ``judge/disagreement``).
    ``critical_path`` is set for orchestration episodes: ``{"stages": [...],
    "critical_steps": int, "total_steps": int, "path": [...]}``.
    """

    breakdown: RewardBreakdown
    judgements: tuple[Judgement, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)
    critical_path: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TrajectoryInfo:
    """Where one rollout of the batch is stored (its step's ``group`` and ``index``,
    its task) and what the trainer measured of it beyond its reward metrics
    (``length``: generated tokens, ``entropy``: mean over trained tokens): what a
    detector's evidence reads (``rewards.evidence``)."""

    group: int
    index: int
    task_id: str = ""
    stats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrajectoryRef:
    """One trajectory an alert points at (of the alert's step), and why it counts."""

    group: int
    index: int
    task_id: str = ""
    why: str = ""


@dataclass(frozen=True)
class Alert:
    """A reward-hacking (or training-health) detector firing, with its evidence and
    the trajectories of its step that show the pattern (``trajectories``)."""

    detector: str
    severity: str  # "warning" | "critical"
    message: str
    step: int
    evidence: Mapping[str, Any] = field(default_factory=dict)
    trajectories: tuple[TrajectoryRef, ...] = ()


class RewardFn(Protocol):
    """What the trainer calls once per batch. ``step`` drives weight schedules."""

    def __call__(
        self, episodes: Sequence[Episode], step: int
    ) -> list[RewardResult]: ...


class Monitor(Protocol):
    """Stateful detector runner, called once per training step after the update.
    ``trajectories`` (one per episode, same order) lets an alert name the
    trajectories that made it fire; without it alerts name none."""

    def __call__(
        self,
        step: int,
        metrics: Mapping[str, float],
        episodes: Sequence[Episode],
        results: Sequence[RewardResult],
        trajectories: Sequence[TrajectoryInfo] | None = None,
    ) -> list[Alert]: ...
