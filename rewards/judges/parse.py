"""Parse a generative judge's free-text answer into scores, a rationale and a step.

The expected answer (see :func:`rewards.judges.base.build_prompt`)::

    rationale: the agent searched twice and kept both gold documents
    recall: 8/10
    precision: 6
    step: 3

Everything a judge writes is untrusted text: it is matched with regular expressions,
never evaluated. Anything short of a finite, in-range score for every rubric dimension
raises :class:`JudgeParseError`, which the backend records as a failed judgement with
the raw text (never a crash, never a silent 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

_LINE = re.compile(r"^[\s>*#-]*\**\s*([A-Za-z0-9_.-]+)\s*\**\s*[:=]\s*(.*)$")
_NUMBER = re.compile(
    r"^\**\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+|nan|inf(?:inity)?))"
    r"(?:\s*/\s*(\d+(?:\.\d*)?))?",
    re.IGNORECASE,
)


class JudgeParseError(ValueError):
    """The judge's answer could not be read; the message says what was wrong."""


@dataclass(frozen=True)
class ParsedJudgement:
    scores: dict[str, float]  # per dimension, normalised to [0, 1]
    rationale: str
    target_step: int | None


def _score(dim: str, value: str, scale: float) -> float:
    m = _NUMBER.match(value.strip())
    if not m:
        raise JudgeParseError(f"{dim}: no number in {value[:80]!r}")
    number = float(m.group(1))
    denom = float(m.group(2)) if m.group(2) else scale
    if not math.isfinite(number) or denom <= 0:
        raise JudgeParseError(f"{dim}: non-finite score {m.group(0)!r}")
    if not 0.0 <= number <= denom:
        raise JudgeParseError(f"{dim}: score {number:g} outside 0..{denom:g}")
    return number / denom


def _step(value: str) -> int | None:
    m = re.match(r"^\s*(\d{1,6})\b", value)
    return int(m.group(1)) if m else None


def parse_judge_output(
    text: str, dimensions: Sequence[str], *, scale: float = 10.0
) -> ParsedJudgement:
    """Scores for every dimension (``name: 7``, ``name: 7/10``, ``**name** = 0.7/1``).

    >>> p = parse_judge_output("rationale: fine\\nrecall: 8/10\\nstep: 2", ["recall"])
    >>> p.scores, p.rationale, p.target_step
    ({'recall': 0.8}, 'fine', 2)
    >>> parse_judge_output("recall: nan", ["recall"])
    Traceback (most recent call last):
    ...
    rewards.judges.parse.JudgeParseError: recall: non-finite score 'nan'
    """
    wanted = {d.casefold(): d for d in dimensions}
    scores: dict[str, float] = {}
    rationale: list[str] = []
    target: int | None = None
    in_rationale = False
    other: list[str] = []
    for line in (text or "").splitlines():
        m = _LINE.match(line)
        key = m.group(1).casefold() if m else None
        if m and key in wanted:
            in_rationale = False
            scores.setdefault(wanted[key], _score(wanted[key], m.group(2), scale))
        elif m and key == "rationale":
            in_rationale = True
            rationale.append(m.group(2).strip())
        elif m and key == "step":
            in_rationale = False
            target = _step(m.group(2)) if target is None else target
        elif in_rationale:
            rationale.append(line.strip())
        elif line.strip():
            other.append(line.strip())
    missing = [d for d in dimensions if d not in scores]
    if missing:
        raise JudgeParseError(f"no score for: {', '.join(missing)}")
    text_out = " ".join(r for r in rationale if r) or " ".join(other)
    return ParsedJudgement(scores=scores, rationale=text_out[:4000], target_step=target)
