"""Generative reward models (judges): rule-based, local transformers, OpenAI-compatible.

Importing this package registers the three backends in :data:`JUDGE_BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rewards.config import JudgeConfig
from rewards.judges import hf, openai, rubric  # noqa: F401  (register the backends)
from rewards.judges.base import (
    Judge,
    JudgeDeps,
    ModelLoader,
    aggregate,
    disagreement,
    run_judges,
)
from rewards.judges.endpoints import EndpointSpec
from rewards.registry import JUDGE_BACKENDS


def build_judges(
    configs: Sequence[JudgeConfig],
    *,
    endpoints: Mapping[str, EndpointSpec] | None = None,
    model_loader: ModelLoader | None = None,
) -> list[Judge]:
    """One judge per config, in order (nothing is loaded or contacted yet)."""
    deps = JudgeDeps(endpoints=dict(endpoints or {}), model_loader=model_loader)
    return [JUDGE_BACKENDS.get(c.backend)(c, deps) for c in configs]


__all__ = [
    "JUDGE_BACKENDS",
    "EndpointSpec",
    "Judge",
    "JudgeDeps",
    "aggregate",
    "build_judges",
    "disagreement",
    "run_judges",
]
