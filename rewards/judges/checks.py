"""Deterministic rubric checks: the rule-based judge's dimensions.

Each check reads an episode's facts and returns a score in [0, 1] plus a sentence that
says why, so the rule-based judge writes a rationale like a generative one would. They
are cheap and reproducible, which makes them the CPU default; they are also exactly as
gameable as the rules they encode, hence the hacking detectors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewards.facts import as_count, as_set, stage_widths
from rewards.registry import Registry
from rewards.types import Episode


@dataclass(frozen=True)
class CheckResult:
    score: float
    note: str
    step: int | None = None


Check = Callable[[Episode], CheckResult]
RUBRIC_CHECKS: Registry[Check] = Registry("rubric check")
_ANSWER_TOOLS = {"answer", "finish"}


def _has(ep: Episode, key: str) -> bool:
    return key in ep.facts


def _na(key: str) -> CheckResult:
    return CheckResult(0.0, f"not applicable: the episode has no {key!r} fact")


@RUBRIC_CHECKS.register("success")
def success(ep: Episode) -> CheckResult:
    if ep.facts.get("success") is True:
        return CheckResult(1.0, "the task was solved")
    partial = ep.facts.get("partial")
    if isinstance(partial, int | float) and 0 <= partial <= 1:
        return CheckResult(float(partial), f"not solved; partial credit {partial:g}")
    return CheckResult(0.0, "the task was not solved")


@RUBRIC_CHECKS.register("answer_given")
def answer_given(ep: Episode) -> CheckResult:
    last = ep.steps[-1] if ep.steps else None
    if last is not None and last.ok and last.tool in _ANSWER_TOOLS:
        return CheckResult(1.0, f"ended with a well-formed {last.tool}", last.index)
    return CheckResult(0.0, "never gave a well-formed final answer")


@RUBRIC_CHECKS.register("tool_validity")
def tool_validity(ep: Episode) -> CheckResult:
    if not ep.steps:
        return CheckResult(0.0, "no steps taken")
    bad = [s.index for s in ep.steps if not s.ok]
    share = 1 - len(bad) / len(ep.steps)
    if not bad:
        return CheckResult(1.0, "every tool call was well-formed")
    return CheckResult(
        share, f"{len(bad)} malformed call(s), first at step {bad[0]}", bad[0]
    )


@RUBRIC_CHECKS.register("no_truncation")
def no_truncation(ep: Episode) -> CheckResult:
    if ep.facts.get("truncated"):
        return CheckResult(0.0, "stopped by the step or token budget")
    return CheckResult(1.0, "finished within budget")


@RUBRIC_CHECKS.register("used_tool")
def used_tool(ep: Episode) -> CheckResult:
    if _has(ep, "used_calculator"):
        used = bool(ep.facts["used_calculator"])
        return CheckResult(float(used), "used the calculator" if used else "guessed")
    for s in ep.steps:
        if s.ok and s.tool and s.tool not in _ANSWER_TOOLS:
            return CheckResult(1.0, f"used {s.tool} at step {s.index}", s.index)
    return CheckResult(0.0, "answered without using a tool")


def _gold_share(ep: Episode, key: str, what: str) -> CheckResult:
    if not _has(ep, "gold") or not _has(ep, key):
        return _na("gold" if not _has(ep, "gold") else key)
    gold, got = as_set(ep.facts["gold"]), as_set(ep.facts[key])
    if not gold:
        return CheckResult(1.0, "no gold documents: nothing to miss")
    hit = len(gold & got)
    return CheckResult(hit / len(gold), f"{what} {hit} of {len(gold)} gold documents")


@RUBRIC_CHECKS.register("recall")
def recall(ep: Episode) -> CheckResult:
    return _gold_share(ep, "surfaced_all", "surfaced")


@RUBRIC_CHECKS.register("evidence_retained")
def evidence_retained(ep: Episode) -> CheckResult:
    return _gold_share(ep, "retained", "kept")


@RUBRIC_CHECKS.register("multiple_searches")
def multiple_searches(ep: Episode) -> CheckResult:
    n = _searches(ep)
    return CheckResult(min(1.0, n / 2), f"{n} search(es)")


@RUBRIC_CHECKS.register("decomposition")
def decomposition(ep: Episode) -> CheckResult:
    if not _has(ep, "stages"):
        return _na("stages")
    widths = stage_widths(ep.facts["stages"])
    peak = max(widths, default=0)
    score = 1.0 if peak >= 2 else 0.5 if peak == 1 else 0.0
    return CheckResult(score, f"at most {peak} sub-agent(s) in parallel")


@RUBRIC_CHECKS.register("subtask_completion")
def subtask_completion(ep: Episode) -> CheckResult:
    assigned = as_count(ep.facts.get("subtasks_assigned"))
    done = min(as_count(ep.facts.get("subtasks_completed")), assigned)
    if assigned == 0:
        return CheckResult(0.0, "no subtasks assigned")
    return CheckResult(done / assigned, f"{done} of {assigned} subtasks completed")


def _searches(ep: Episode) -> int:
    facts: Any = ep.facts
    if "num_searches" in facts:
        return as_count(facts["num_searches"])
    return sum(1 for s in ep.steps if s.ok and s.tool == "search")
