"""Reward components for datasets: the final answer against the reference answer.

They read the ``answer`` (the policy's final text, None when it never answered) and
``reference`` episode facts the ``dataset`` environment reports, and pay 1 or 0 on
the step that gave the answer (the final step), so per-step attribution shows which
turn earned it. Registered like every component (:mod:`rewards.components`).
"""

from __future__ import annotations

import math
import re

from rewards.components import (
    NO_CONTEXT,
    Context,
    PerStep,
    on_last,
    on_steps,
    register_component,
)
from rewards.params import (
    ContainsParams,
    ExactMatchParams,
    NumericMatchParams,
    RegexMatchParams,
)
from rewards.types import Episode

_DATASET = {"dataset"}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
MAX_ANSWER_CHARS = 20_000  # longer answers are cut before matching (regex cost)


def _pair(ep: Episode) -> tuple[str, str] | None:
    answer, reference = ep.facts.get("answer"), ep.facts.get("reference")
    if not isinstance(answer, str) or reference is None:
        return None
    return answer[:MAX_ANSWER_CHARS], str(reference)


def normalise(text: str) -> str:
    """Lower case, single spaces, no surrounding punctuation or quotes.

    >>> normalise('  The  Answer: "Paris". ')
    'the answer: "paris'
    """
    return " ".join(text.lower().split()).strip(" .,;:!?\"'`")


def last_number(text: str) -> float | None:
    """The number in the last ``\\boxed{}``, else the last number in the text.

    >>> last_number("3 apples and 4 more: \\\\boxed{7} (not 8)")
    7.0
    >>> last_number("it is 1,234.5 or so"), last_number("none")
    (1234.5, None)
    """
    boxed = _BOXED.findall(text)
    if boxed:
        text = boxed[-1]
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


@register_component("exact_match", ExactMatchParams, envs=_DATASET)
def exact_match(ep: Episode, p: ExactMatchParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """1 when the answer equals the reference (normalised unless told otherwise).

    >>> from rewards.synthetic import episode
    >>> exact_match(episode("dataset", [{}], answer="Paris.", reference="paris"),
    ...             ExactMatchParams())
    (1.0,)
    """
    pair = _pair(ep)
    if pair is None:
        return on_last(ep, 0.0)
    a, r = (normalise(x) for x in pair) if p.normalise else pair
    return on_last(ep, float(a == r))


@register_component("numeric_match", NumericMatchParams, envs=_DATASET)
def numeric_match(
    ep: Episode, p: NumericMatchParams, ctx: Context = NO_CONTEXT
) -> PerStep:
    """1 when the answer's number (last ``\\boxed{}`` or last number) is within the
    tolerance of the reference's.

    >>> from rewards.synthetic import episode
    >>> numeric_match(episode("dataset", [{}, {}], answer="so 12.0", reference="12"),
    ...               NumericMatchParams())
    (0.0, 1.0)

    With ``tool_credit``, a missed answer still earns it on the tool call that
    computed the reference:

    >>> calc = {"tool": "calculator", "observation": "12"}
    >>> numeric_match(episode("dataset", [calc, {}], answer="7", reference="12"),
    ...               NumericMatchParams(tool_credit=0.5))
    (0.5, 0.0)
    """
    ref = ep.facts.get("reference")
    r = last_number(str(ref)) if ref is not None else None
    if r is None:
        return on_last(ep, 0.0)

    def close(text: str) -> bool:
        a = last_number(text[:MAX_ANSWER_CHARS])
        return a is not None and math.isclose(
            a, r, abs_tol=p.abs_tol, rel_tol=p.rel_tol
        )

    answer = ep.facts.get("answer")
    if isinstance(answer, str) and close(answer):
        return on_last(ep, 1.0)
    if p.tool_credit:
        for s in ep.steps:
            if s.ok and s.tool not in (None, "answer") and close(s.observation):
                return on_steps(ep, {s.index: p.tool_credit})
    return on_last(ep, 0.0)


@register_component("regex_match", RegexMatchParams, envs=_DATASET)
def regex_match(ep: Episode, p: RegexMatchParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """1 when the answer matches ``pattern`` (or the reference used as a pattern).

    >>> from rewards.synthetic import episode
    >>> regex_match(episode("dataset", [{}], answer="ID-042", reference="x"),
    ...             RegexMatchParams(pattern=r"ID-\\d+", full=True))
    (1.0,)
    """
    pair = _pair(ep)
    if pair is None:
        return on_last(ep, 0.0)
    try:
        rx = re.compile(p.pattern or pair[1], re.IGNORECASE if p.ignore_case else 0)
    except re.error:  # a reference that is not a valid pattern matches nothing
        return on_last(ep, 0.0)
    found = rx.fullmatch(pair[0].strip()) if p.full else rx.search(pair[0])
    return on_last(ep, float(found is not None))


@register_component("contains", ContainsParams, envs=_DATASET)
def contains(ep: Episode, p: ContainsParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """1 when the reference appears in the answer.

    >>> from rewards.synthetic import episode
    >>> contains(episode("dataset", [{}], answer="It is PARIS", reference="paris"),
    ...          ContainsParams())
    (1.0,)
    """
    pair = _pair(ep)
    if pair is None or not pair[1]:
        return on_last(ep, 0.0)
    a, r = pair
    if p.ignore_case:
        a, r = a.lower(), r.lower()
    return on_last(ep, float(r in a))
