"""The rule-based judge: deterministic checks per rubric dimension (the CPU default).

It speaks the same language as a generative judge (per-dimension scores, a combined
score, a rationale) so the UI and the aggregation treat both alike, but its backend is
``rubric`` and every rationale starts with ``rule-based:`` so nobody mistakes it for a
model's opinion.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.config import JudgeConfig
from rewards.judges.base import JudgeDeps, combine_dimensions, failure
from rewards.judges.checks import RUBRIC_CHECKS
from rewards.registry import JUDGE_BACKENDS
from rewards.types import Episode, Judgement


class RubricJudge:
    backend = "rubric"

    def __init__(self, cfg: JudgeConfig) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self._checks = [
            (d.name, RUBRIC_CHECKS.get(d.check or d.name)) for d in cfg.rubric
        ]

    def judge_one(self, ep: Episode) -> Judgement:
        """Run every check; a check that raises makes the judgement a failure."""
        try:
            results = {name: check(ep) for name, check in self._checks}
        except Exception as exc:  # noqa: BLE001 - facts are untrusted; record, go on
            return failure(self.cfg, f"check failed: {type(exc).__name__}: {exc}")
        scores = {name: min(1.0, max(0.0, r.score)) for name, r in results.items()}
        notes = "; ".join(
            f"{n}: {r.note} ({scores[n]:.2f})" for n, r in results.items()
        )
        return Judgement(
            judge=self.name,
            backend=self.backend,
            ok=True,
            score=combine_dimensions(scores, self.cfg),
            scores=scores,
            rationale=f"rule-based: {notes}",
        )

    def __call__(self, episodes: Sequence[Episode]) -> list[Judgement]:
        return [self.judge_one(ep) for ep in episodes]


@JUDGE_BACKENDS.register("rubric")
def make_rubric_judge(cfg: JudgeConfig, deps: JudgeDeps) -> RubricJudge:
    """rule-based"""
    return RubricJudge(cfg)
