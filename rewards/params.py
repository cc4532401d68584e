"""Typed parameters of every reward component (one pydantic model per component).

The config schema (:mod:`rewards.config`) nests these under ``params`` so a bad value is
reported with its path (``reward.components.0.fbeta.params.beta``); the component
functions receive the validated model. Pure pydantic: nothing here computes a reward.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class OutcomeParams(Params):
    partial_credit: bool = Field(
        False,
        description="On failure, pay the episode's 'partial' fact (clipped to [0, 1]) "
        "instead of 0.",
    )


class ProcessParams(Params):
    key: str = Field(
        "reward",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Step fact to sum: a number (bools count 0/1) or a list (its "
        "length counts), e.g. 'surfaced_gold' (search) or 'newly_completed' (swarm).",
    )
    scale: float = Field(1.0, ge=-1000, le=1000, description="Multiplies each value.")
    malformed: float = Field(
        0.0,
        ge=-1000,
        le=1000,
        description="Added on a step whose tool call was not ok.",
    )


class FormatParams(Params):
    scale: float = Field(
        1.0,
        ge=-1000,
        le=1000,
        description="Total for an episode whose every step is a well-formed tool call.",
    )


class FBetaParams(Params):
    beta: float = Field(
        4.0,
        gt=0,
        le=100,
        description="Recall is beta^2 times as important as precision (Context-1: 4).",
    )


class TrajectoryRecallParams(Params):
    pass


class PrunePenaltyParams(Params):
    penalty: float = Field(0.05, ge=0, le=1000, description="Paid per offending prune.")
    max_docs: int = Field(
        1,
        ge=1,
        le=1000,
        description="A prune of at most this many documents is 'small'.",
    )
    allowed: int = Field(
        1, ge=0, le=1000, description="Small prunes per episode that go unpunished."
    )


class SingleSearchExitParams(Params):
    penalty: float = Field(0.2, ge=0, le=1000)
    min_searches: int = Field(
        2, ge=1, le=1000, description="An answer after fewer searches is penalised."
    )
    waive_on_full_recall: bool = Field(
        False, description="No penalty when every gold document was surfaced anyway."
    )


class PerfParams(Params):
    budget: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Critical-step budget; 0: no latency discount.",
    )
    discount: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of the success reward lost at (or over) the budget.",
    )
    partial_credit: bool = Field(False, description="As in outcome.")


class ParallelParams(Params):
    max_subagents: int = Field(
        4, ge=1, le=10_000, description="Sub-agents per episode that earn the full 1.0."
    )


class FinishParams(Params):
    pass


class JudgeParams(Params):
    judges: list[str] | None = Field(
        None,
        max_length=16,
        description="Names of the configured judges this component aggregates; "
        "None: all of them.",
    )


class OverlongParams(Params):
    max_len: int = Field(
        512,
        ge=1,
        le=1_000_000,
        description="Generated tokens at which the penalty reaches -1 (DAPO: the "
        "generation budget).",
    )
    cache: int = Field(
        128,
        ge=0,
        le=1_000_000,
        description="Width of the soft zone before max_len where the penalty falls "
        "linearly from 0 to -1 (DAPO: 4096 of 20480).",
    )

    @model_validator(mode="after")
    def _cache_fits(self) -> OverlongParams:
        if self.cache > self.max_len:
            raise ValueError("cache: must not exceed max_len")
        return self


class ExactMatchParams(Params):
    normalise: bool = Field(
        True,
        description="Compare lower-cased, with single spaces and no surrounding "
        "punctuation or quotes.",
    )


class NumericMatchParams(Params):
    abs_tol: float = Field(
        1e-6, ge=0, le=1e12, description="Largest absolute difference that matches."
    )
    rel_tol: float = Field(
        0.0, ge=0, le=1, description="Largest relative difference that matches."
    )
    tool_credit: float = Field(
        0.0,
        ge=0,
        le=1,
        description="When the answer misses: paid on the first successful tool call "
        "whose result matches the reference (a process reward for computing it).",
    )


class RegexMatchParams(Params):
    pattern: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="Pattern the answer must match; None: the reference answer is "
        "the pattern.",
    )
    full: bool = Field(False, description="The whole answer must match.")
    ignore_case: bool = Field(False)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc})") from None
        return v


class ContainsParams(Params):
    ignore_case: bool = Field(True)
