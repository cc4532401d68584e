"""Reward components: small pure functions from an episode's facts to per-step rewards.

Every component returns one value per step (``len == max(1, num_steps)``: an episode
without steps gets one pseudo-step) whose sum is its total, so the UI can show which
step earned what. Trajectory-level rewards (outcome, F-beta, r_perf, judges) land on
the final step; process rewards land on the steps that earned them. Components are
unweighted here; :mod:`rewards.combine` applies the scheduled weights.

This module holds the registry and the generic components (outcome, process, format,
judge); search rewards live in :mod:`rewards.search`, PARL in :mod:`rewards.parl`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rewards.facts import as_count, as_float
from rewards.judge_scores import coefficients, usable
from rewards.params import (
    FormatParams,
    JudgeParams,
    OutcomeParams,
    OverlongParams,
    Params,
    ProcessParams,
)
from rewards.registry import Registry
from rewards.types import Episode, Judgement

PerStep = tuple[float, ...]


@dataclass(frozen=True)
class Context:
    """What a component may know beyond the episode: the training step, and this
    episode's judgements with the aggregate rule (only the judge component reads
    them)."""

    step: int = 0
    judgements: tuple[Judgement, ...] = ()
    judge_aggregate: str = "mean"


NO_CONTEXT = Context()
ComponentFn = Callable[[Episode, Params, Context], PerStep]


@dataclass(frozen=True)
class ComponentSpec:
    name: str
    fn: ComponentFn
    params: type[Params]
    envs: frozenset[str] | None = None  # None: any environment
    doc: str = field(default="", repr=False)
    # Pays for something other than solving the task (a format, a judge's opinion, a
    # behaviour bonus): what the ``reward_without_success`` detector watches.
    proxy: bool = False


COMPONENTS: Registry[ComponentSpec] = Registry("reward component")


def register_component(
    name: str,
    params: type[Params],
    envs: set[str] | None = None,
    *,
    proxy: bool = False,
) -> Callable[[ComponentFn], ComponentFn]:
    """Register ``fn`` as a component; ``proxy``: it pays for something other than
    solving the task (see :class:`ComponentSpec`)."""

    def deco(fn: ComponentFn) -> ComponentFn:
        envset = frozenset(envs) if envs is not None else None
        COMPONENTS.register(name)(
            ComponentSpec(name, fn, params, envset, fn.__doc__ or "", proxy)
        )
        return fn

    return deco


def slots(ep: Episode) -> int:
    """Steps a reward can land on: the episode's steps, or one pseudo-step."""
    return max(1, ep.num_steps)


def on_last(ep: Episode, value: float) -> PerStep:
    """``value`` on the final step, 0 elsewhere."""
    out = [0.0] * slots(ep)
    out[-1] = float(value)
    return tuple(out)


def on_steps(ep: Episode, values: Mapping[int, float]) -> PerStep:
    """Values at given step indices (clamped into range), 0 elsewhere."""
    out = [0.0] * slots(ep)
    for i, v in values.items():
        out[min(max(i, 0), len(out) - 1)] += float(v)
    return tuple(out)


def success_value(ep: Episode, partial_credit: bool) -> float:
    """1.0 on success; on failure the clipped ``partial`` fact if asked for, else 0."""
    if ep.facts.get("success") is True:
        return 1.0
    if partial_credit:
        return min(1.0, max(0.0, as_float(ep.facts.get("partial"))))
    return 0.0


@register_component("outcome", OutcomeParams)
def outcome(ep: Episode, p: OutcomeParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """1 on task success, else 0 (or the partial credit), on the final step.

    >>> from rewards.synthetic import episode
    >>> outcome(episode("calc", [{}, {}], success=True), OutcomeParams())
    (0.0, 1.0)
    >>> outcome(episode("calc", [{}], success=False, partial=0.5),
    ...         OutcomeParams(partial_credit=True))
    (0.5,)
    """
    return on_last(ep, success_value(ep, p.partial_credit))


@register_component("process", ProcessParams)
def process(ep: Episode, p: ProcessParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """R_total = sum of step rewards: each step pays ``scale * facts[key]`` (a list
    counts its length, a bool 0/1), plus ``malformed`` on a step that was not ok.

    >>> from rewards.synthetic import episode
    >>> ep = episode("search", [{"surfaced_gold": ["a", "b"]}, {"ok": False}])
    >>> process(ep, ProcessParams(key="surfaced_gold", scale=0.5, malformed=-0.1))
    (1.0, -0.1)
    """
    out = []
    for s in ep.steps:
        v = s.facts.get(p.key)
        value = as_count(v) if isinstance(v, list | tuple) else as_float(v)
        out.append(p.scale * value + (0.0 if s.ok else p.malformed))
    return tuple(out) or (0.0,)


@register_component("format", FormatParams, proxy=True)
def format_reward(ep: Episode, p: FormatParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """``scale * share of well-formed tool calls``, each ok step earning its share: a
    learning signal for a from-scratch model before it ever succeeds.

    >>> from rewards.synthetic import episode
    >>> format_reward(episode("calc", [{"ok": True}, {"ok": False}, {"ok": True},
    ...                                {"ok": True}]), FormatParams(scale=1.0))
    (0.25, 0.0, 0.25, 0.25)
    """
    if not ep.steps:
        return (0.0,)
    share = p.scale / ep.num_steps
    return tuple(share if s.ok and s.tool else 0.0 for s in ep.steps)


@register_component("judge", JudgeParams, proxy=True)
def judge(ep: Episode, p: JudgeParams, ctx: Context = NO_CONTEXT) -> PerStep:
    """The aggregate of the judges' combined scores (mean, min or median over the
    usable ones), each judge's share landing on the step it names (else the last).
    Failed judges are left out; if every judge failed this is 0 and the failure is
    reported by :mod:`rewards.combine` in ``judge/failures``.

    >>> from rewards.synthetic import episode
    >>> a = Judgement("a", "rubric", True, 0.6, {}, "", target_step=0)
    >>> b = Judgement("b", "hf", True, 0.2, {}, "")
    >>> judge(episode("calc", [{}, {}]), JudgeParams(), Context(judgements=(a, b)))
    (0.3, 0.1)
    """
    chosen = [
        j
        for j in ctx.judgements
        if usable(j) and (p.judges is None or j.judge in p.judges)
    ]
    scores = [float(j.score or 0.0) for j in chosen]  # usable: score is finite
    coef = coefficients(scores, ctx.judge_aggregate)
    last = slots(ep) - 1
    parts: dict[int, float] = {}
    for c, s, j in zip(coef, scores, chosen, strict=True):
        at = j.target_step if j.target_step is not None else last
        at = at if 0 <= at <= last else last
        parts[at] = parts.get(at, 0.0) + c * s
    return on_steps(ep, parts)


def overlong_value(length: int, max_len: int, cache: int) -> float:
    """DAPO's soft overlong punishment (arXiv 2503.14476 eq. 13) of a length."""
    if length <= max_len - cache:
        return 0.0
    if length <= max_len:
        return (max_len - cache - length) / cache
    return -1.0


@register_component("overlong_penalty", OverlongParams)
def overlong_penalty(
    ep: Episode, p: OverlongParams, ctx: Context = NO_CONTEXT
) -> PerStep:
    """DAPO's overlong reward shaping: 0 up to ``max_len - cache`` generated tokens,
    then linearly down to -1 at ``max_len``, -1 beyond. It lands on the step that
    made the trajectory long: the first whose tokens took the running total past
    ``max_len - cache``. Lengths come from the ``action_tokens`` fact (tokens the
    policy generated per step), which the trainer's rollout records.

    >>> from rewards.synthetic import episode
    >>> ep = episode("calc", [{}, {}, {}], action_tokens=[3, 7, 1])
    >>> overlong_penalty(ep, OverlongParams(max_len=13, cache=4))
    (0.0, -0.5, 0.0)
    """
    counts = ep.facts.get("action_tokens")
    if not isinstance(counts, list | tuple) or not counts:
        return on_last(ep, 0.0)
    lengths = [max(0, int(as_float(c))) for c in counts]
    total = sum(lengths)
    value = overlong_value(total, p.max_len, p.cache)
    if value == 0.0:
        return on_last(ep, 0.0)
    running, at = 0, len(lengths) - 1
    for i, n in enumerate(lengths):
        running += n
        if running > p.max_len - p.cache:
            at = i
            break
    return on_steps(ep, {at: value})
