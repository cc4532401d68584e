"""One trajectory laid out for reading: its agent steps in order, the reward each
component paid at each step (with the sum checks), the judges' verdicts beside the
steps they judged, the reference answer beside what the environment parsed from the
policy's final turn (the critical-path Gantt: :mod:`dashboard.pages.gantt`).

Segments are grouped into steps by ``turn``: the policy's ``action`` (thought and tool
call) then what came back (``tool`` output or a ``subagent`` result). Text stays raw
here; templates escape it and the token heatmap sets it with ``textContent``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dashboard import jsonsafe
from dashboard.ingest import prompts
from dashboard.models import Judgement, Trajectory
from dashboard.pages import reward_weights
from dashboard.reads.trajectories import SegmentPage
from rewards.matching import last_number

TOLERANCE = 1e-6
OBSERVATION_LABELS = {"tool": "observation", "subagent": "sub-agent result"}


PREVIEW_CHARS = 1000  # of a segment outside the page: the rest is a click away


@dataclass
class Segment:
    k: int  # position in the trajectory's segment list (the heatmap's key)
    turn: int | None
    kind: str
    text: str
    mask: str | None
    n: int
    heat_n: int = 0  # tokens the heatmap colours in place of the text (0: text shown)
    more_chars: int = 0  # characters of the text not shown (the page is elsewhere)
    coloured: int = 0  # tokens that have colours, when fewer than n (cut to the page)
    paged: bool = True  # in the page shown (else a preview: another page has it)
    # Single tokens the update left out, per reason: "2 is_ratio, 1 low_entropy".
    masked: str = ""
    branch: int | None = None  # of a branched conversation (prime-rl's traces)
    fork: str = ""  # on a branch's first segment: where it leaves the others

    single: bool = False  # the one answer of a single-turn rollout without tools

    @property
    def label(self) -> str:
        if self.kind == "action":
            return "completion" if self.single else "thought / tool call"
        return OBSERVATION_LABELS.get(self.kind, self.kind)


@dataclass
class StepBlock:
    index: int
    segments: list[Segment] = field(default_factory=list)
    rewards: list[tuple[str, float]] = field(default_factory=list)
    total: float = 0.0
    judgements: list[Judgement] = field(default_factory=list)
    # Beside each of ``rewards``: "1 × 0.2" where it is a score times its weight.
    weighed: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[tuple[str, float, str]]:
        """(component, its part of this step's reward, "score × weight" or "")."""
        notes = self.weighed + [""] * (len(self.rewards) - len(self.weighed))
        return [(n, v, note) for (n, v), note in zip(self.rewards, notes, strict=True)]

    @property
    def tool(self) -> str:
        """The tool the action called: its first word (the environments' grammar)."""
        for seg in self.segments:
            if seg.kind == "action":
                words = seg.text.split()
                return words[0] if words else ""
        return ""


@dataclass(frozen=True)
class ComponentCheck:
    name: str
    total: float
    step_sum: float
    ok: bool
    attributed: bool = True  # False: no per-step value, and no step to pay it on
    # A score weighted into the total (TRL's reward_weights): ``total`` and
    # ``step_sum`` are its part, score x weight.
    score: float | None = None
    weight: float | None = None


@dataclass
class TrajectoryView:
    prompt: list[Segment]
    steps: list[StepBlock]
    components: list[str]
    checks: list[ComponentCheck]
    total: float
    component_sum: float
    total_ok: bool
    episode_judgements: list[Judgement]
    # The components are scores weighted into the total by these (a name each).
    weights: dict[str, float] = field(default_factory=dict)
    # The run's reward_weights, when this rollout was stored without which weight is
    # whose and its scores add up to the total only weighted by them.
    unassigned_weights: list[float] = field(default_factory=list)

    @property
    def weighted(self) -> bool:
        return any(w != 1.0 for w in self.weights.values())

    @property
    def all_ok(self) -> bool:
        return self.total_ok and all(c.ok for c in self.checks)

    @property
    def attributed(self) -> bool:
        """Whether any component came with rewards per step (an external run's may
        send totals alone, and no step to pay them on)."""
        return any(c.attributed for c in self.checks)


def _f(value: Any) -> float:
    return jsonsafe.to_float(value)


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))


def _per_step(
    per_step: dict[str, Any], comps: dict[str, Any], name: str, n_steps: int
) -> list[Any]:
    """A component's reward per agent step. One reported without per-step values (an
    outcome reward from TRL, verl or an import) is paid on the last step."""
    values = per_step.get(name)
    if isinstance(values, list) and values:
        return values
    if name in comps and n_steps:
        return [0.0] * (n_steps - 1) + [comps[name]]
    return []


def _masked_counts(masked: Any) -> str:
    """``[[position, reason], ...]`` -> ``"2 is_ratio, 1 low_entropy"``."""
    counts: dict[str, int] = {}
    for m in masked if isinstance(masked, list) else []:
        if isinstance(m, list) and len(m) == 2:
            counts[str(m[1])] = counts.get(str(m[1]), 0) + 1
    return ", ".join(f"{n} {reason}" for reason, n in counts.items())


def _segments(t: Trajectory, page: SegmentPage | None) -> list[Segment]:
    """Every segment of ``t``: those of ``page`` (all, without one) as the page has
    them, the others as a preview of their text."""
    metas = page.metas if page is not None else prompts.meta_of(t)
    paged = {s["k"]: s for s in page.segments} if page is not None else None
    out = []
    for k, s in enumerate(metas):
        text, n = str(s.get("text") or ""), int(s.get("n") or 0)
        seg = Segment(
            k, s.get("turn"), str(s.get("kind") or ""), text, s.get("mask"), n
        )
        seg.masked = _masked_counts(s.get("masked"))
        branch = s.get("branch")
        seg.branch = branch if type(branch) is int else None
        shown = paged.get(k) if paged is not None else s
        if shown is None:
            seg.text, seg.paged = text[:PREVIEW_CHARS], False
        else:
            seg.text = str(shown.get("text") or "")
            coloured = len(shown.get("tokens") or [])
            seg.heat_n = n if coloured >= n else 0  # cut: the text stays shown too
            seg.coloured = coloured if coloured < n else 0
        seg.more_chars = len(text) - len(seg.text)
        out.append(seg)
    return out


def _forks(segments: list[Segment], facts: Any) -> None:
    """On the first segment of each branch, where it leaves the branches before it
    (``facts["branches"]``: ``forks_from``, ``after_messages``)."""
    told = facts.get("branches") if isinstance(facts, dict) else None
    tree = {b.get("branch"): b for b in told or [] if isinstance(b, dict)}
    seen: set[int] = set()
    for seg in segments:
        if seg.branch is None or seg.branch in seen:
            continue
        seen.add(seg.branch)
        b = tree.get(seg.branch) or {}
        after, parent = b.get("after_messages"), b.get("forks_from")
        if type(parent) is int and type(after) is int:
            seg.fork = (
                f"branch {seg.branch} starts here: it shares the first {after} "
                f"messages of branch {parent}, then goes its own way"
            )
        elif seg.branch:
            seg.fork = f"branch {seg.branch} starts here, from a root of its own"


def build(
    t: Trajectory,
    judgements: list[Judgement],
    order: list[str] | None = None,
    page: SegmentPage | None = None,
    run_weights: list[float] | None = None,
) -> TrajectoryView:
    """``order``: the run's component names in config order (stored dicts lose it).
    ``page``: the segments shown in full (:func:`dashboard.reads.trajectories.
    segment_page`); the others show a preview of their text. Components stored with
    weights (``rewards["weights"]``: TRL's scores) count as score x weight, in each
    step and in the sums; ``run_weights`` (the run's ``reward_weights``) explain a
    rollout stored without them whose scores add up only weighted."""
    segments = _segments(t, page)
    _forks(segments, t.facts)
    answered = [s for s in segments if s.kind != "prompt"]
    if len(answered) == 1 and answered[0].kind == "action" and not t.agent_steps:
        answered[0].single = True  # a prompt and its completion: no tools, one turn
    rewards = t.rewards if isinstance(t.rewards, dict) else {}
    per_step = (
        rewards.get("per_step") if isinstance(rewards.get("per_step"), dict) else {}
    )
    comps = (
        rewards.get("components") if isinstance(rewards.get("components"), dict) else {}
    )
    names = list(dict.fromkeys([*comps, *per_step]))
    rank = {name: i for i, name in enumerate(order or [])}
    first_seen = {n: i for i, n in enumerate(names)}
    names.sort(key=lambda n: (rank.get(n, len(rank)), first_seen[n]))
    turns = [s.turn for s in segments if s.kind != "prompt" and isinstance(s.turn, int)]
    n_steps = max(
        [len(v) for v in per_step.values() if isinstance(v, list)]
        + [max(turns, default=-1) + 1]
    )
    steps = [StepBlock(i) for i in range(n_steps)]
    prompt = []
    for seg in segments:
        if (
            seg.kind == "prompt"
            or not isinstance(seg.turn, int)
            or not 0 <= seg.turn < n_steps
        ):
            prompt.append(seg)
        else:
            steps[seg.turn].segments.append(seg)
    per_step = {name: _per_step(per_step, comps, name, n_steps) for name in names}
    weights = reward_weights.stored(rewards)
    for name in names:
        values, w = per_step[name], weights.get(name, 1.0)
        for i, block in enumerate(steps):
            v = _f(values[i]) if i < len(values) else 0.0
            block.rewards.append((name, v * w))
            block.weighed.append(f"{_g(v)} × {_g(w)}" if w != 1.0 and v else "")
            block.total += v * w
    checks = [_check(name, per_step[name], comps, weights) for name in names]
    total = _f(rewards.get("total", t.reward))
    component_sum = _fsum([c.total for c in checks])
    total_ok = _close(total, component_sum)
    unassigned: list[float] = []
    if not total_ok and not weights and run_weights:
        scores = [_f(comps[n]) for n in names if n in comps]
        if len(scores) == len(names) and reward_weights.fits_some_order(
            scores, run_weights, total
        ):
            total_ok, unassigned = True, list(run_weights)
    episode = []
    for j in judgements:
        if isinstance(j.target_step, int) and 0 <= j.target_step < n_steps:
            steps[j.target_step].judgements.append(j)
        else:
            episode.append(j)
    return TrajectoryView(
        prompt=prompt,
        steps=steps,
        components=names,
        checks=checks,
        total=total,
        component_sum=component_sum,
        total_ok=total_ok,
        episode_judgements=episode,
        weights={n: w for n, w in weights.items() if n in names},
        unassigned_weights=unassigned,
    )


def _g(value: float) -> str:
    return f"{value:.4g}"


def _check(
    name: str, values: list[Any], comps: dict[str, Any], weights: dict[str, float]
) -> ComponentCheck:
    """A component's total against the sum of its per-step values, each its part of
    the reward (score x weight, for a weighted score)."""
    w = weights.get(name)
    raw_sum = _fsum([_f(v) for v in values])
    score = _f(comps.get(name, raw_sum))
    scale = 1.0 if w is None else w
    step_sum = _fsum([_f(v) * scale for v in values])
    total = score * scale
    noted = {"score": score, "weight": w} if w is not None and w != 1.0 else {}
    if not values:  # a total alone: nothing to check it against
        return ComponentCheck(name, total, math.nan, True, False, **noted)
    return ComponentCheck(name, total, step_sum, _close(score, raw_sum), **noted)


# --- answers ------------------------------------------------------------------------------
ANSWER_CHARS = 2000  # of a parsed answer shown beside the reward


def answers(facts: Any, rewards: Any = None) -> dict[str, Any] | None:
    """The reference answer and what the environment parsed from the policy's final
    turn (``dataset``: ``reference``/``answer``; ``calc``: ``expected``/``answer``),
    with the number a numeric match reads from it; None when the facts have no
    reference (an environment without one). For an answer that does not match,
    ``paid``: the reward terms (``rewards["components"]``) that paid it anyway and
    why where the facts say (partial credit), so a positive reward beside a miss is
    not a puzzle."""
    if not isinstance(facts, dict):
        return None
    reference = facts.get("reference", facts.get("expected"))
    if reference is None:
        return None
    answer = facts.get("answer")
    number = None
    if isinstance(answer, str):
        number = last_number(answer[:ANSWER_CHARS])
        answer = answer[:ANSWER_CHARS]
    elif answer is not None:
        answer = str(answer)
    success = facts.get("success")
    success = success if isinstance(success, bool) else None
    return {
        "reference": str(reference)[:ANSWER_CHARS],
        "answer": answer,
        "number": number,
        "read_as": _read_as(answer, number),
        "success": success,
        "paid": _paid_anyway(facts, rewards, number) if success is False else [],
    }


def _read_as(answer: str | None, number: float | None) -> float | None:
    """The number a numeric match reads from the answer, where it says more than the
    answer's text: "The answer is 12" read as 12 tells, "7" read as 7 is noise."""
    if answer is None or number is None:
        return None
    try:
        same = math.isclose(float(answer.strip().replace(",", "")), number)
    except ValueError:
        same = False
    return None if same else number


def _paid_anyway(
    facts: dict[str, Any], rewards: Any, number: float | None = None
) -> list[dict[str, Any]]:
    """``[{"name", "value", "why"}]``: the terms that paid a missed answer.
    ``number``: the last number of the answer, which ``numeric_match`` reads (an
    answer that is not the reference word for word may still end in its number)."""
    comps = rewards.get("components") if isinstance(rewards, dict) else None
    if not isinstance(comps, dict):
        return []
    partial = facts.get("partial")
    partial = partial if isinstance(partial, int | float) and partial > 0 else None
    out = []
    for name, value in comps.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not value > 0:
            continue
        why = ""
        if name == "outcome" and partial is not None:
            why = (
                "partial credit: the calculator computed the reference value, but "
                "the final answer was not it"
                if facts.get("computed_expected")
                else f"partial credit ({partial:g}) from the environment"
            )
        elif name == "numeric_match":
            why = _numeric_why(number, facts.get("reference"))
        elif name == "format":
            why = "a share for each turn that parsed as a tool call or an answer"
        out.append({"name": str(name)[:100], "value": float(value), "why": why})
    return out


def _numeric_why(number: float | None, reference: Any) -> str:
    """Why ``numeric_match`` paid an answer that is not the reference: its last
    number is the reference's (the rule), else a tool call's result was
    (``tool_credit``)."""
    ref = last_number(str(reference)[:ANSWER_CHARS])
    if number is not None and ref is not None and math.isclose(number, ref):
        return f"its last number, {number:g}, is the reference's"
    return "tool credit: a tool call computed the reference value"


def _fsum(values: list[float]) -> float:
    """``math.fsum``, or the plain sum (inf or NaN) where fsum raises: terms whose
    sum passes the float range (stored rewards of 1e308), or inf and -inf."""
    try:
        return math.fsum(values)
    except (OverflowError, ValueError):
        return sum(values)
