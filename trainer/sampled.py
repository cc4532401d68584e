"""What one training step sampled (the loop's, the metrics' and the ranks' shared
record; a module of its own so that none of them imports the loop)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rewards.types import RewardResult
from trainer.rollout import Rollout


@dataclass
class Sampled:
    """What one training step sampled: all rollouts, which were kept for the update."""

    rollouts: list[Rollout]
    results: list[RewardResult]
    kept: list[bool]
    groups_dropped: int
    gen_s: float = 0.0
    reward_s: float = 0.0
    # Per rollout: mean entropy over its trained tokens (None: not trained), for the
    # detectors' evidence; set after the update.
    row_entropy: list[float | None] = field(default_factory=list)
