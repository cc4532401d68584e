"""An alert's evidence for people: the numbers its detector compared, named in words
(``window`` is "steps compared", ``length_early`` "episode length (tokens), early
half"), and the rollouts that show the pattern, listed under each reason once
("2 tokens (0.4x the early mean), not solved: group 1 #0, #2; group 3 #1").

The detectors (:mod:`rewards.detectors`, :mod:`rewards.evidence`) write the keys;
a plugin's keys read as themselves, underscores as spaces. The raw key is kept
beside each label, for anyone matching a row with the API's ``evidence``.
"""

from __future__ import annotations

import re
from typing import Any

# What a key (or a key's stem, before ``_early``/``_late``/...) measures.
NOUNS = {
    "parallelism": "sub-agents per stage",
    "subagents": "sub-agents spawned",
    "serial": "episodes done one subtask at a time",
    "finish_rate": "subtasks finished",
    "yield": "subtasks done per sub-agent",
    "critical_steps": "critical steps",
    "judge": "judge score",
    "success": "success",
    "length": "episode length (tokens)",
    "truncated": "episodes cut off by the turn budget",
    "entropy": "entropy (nats/token)",
    "zero_std": "groups whose rollouts got equal rewards",
    "frac_reward_zero_std": "groups whose rollouts got equal rewards",
    "proxy": "proxy terms' reward",
    "proxy_reward": "proxy terms' reward",
    "repetition": "word pairs repeated within an episode",
    "frac": "episodes answering after one search",
    "prunes": "prunes per episode",
    "single_share": "prunes of one document",
    "episodes": "episodes pruning one document at a time",
    "one_at_a_time": "episodes pruning one document at a time",
}

# Keys that are not a measure's halves.
WHOLE = {
    "window": "steps compared",
    "threshold": "threshold",
    "floor": "entropy floor (nats/token)",
    "min_rise": "least rise that counts",
    "since": "compared with",
    "drift": "what drifted",
    "component": "term that rose most",
    "trajectories_matched": "rollouts of this step that show it",
}

# A stem's suffix: which part of the window the number is of.
PARTS = {
    "early": "early half",
    "late": "late half",
    "start": "at the run's start",
    "rise": "rise over the window",
    "mean": "window mean",
}

MAX_LISTED = 20  # values of a list shown before " …"


def label(key: str) -> str:
    """``key`` in words: "episode length (tokens), early half"; a bare measure
    (the per-step values the window ends with) reads "..., last steps"."""
    if key in WHOLE:
        return WHOLE[key]
    if key in NOUNS:
        return f"{NOUNS[key]}, last steps"
    stem, _, part = key.rpartition("_")
    if stem and part in PARTS:
        return f"{NOUNS.get(stem, stem.replace('_', ' '))}, {PARTS[part]}"
    return key.replace("_", " ")


def _show(key: str, v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "—" if v is None else str(v).lower()
    if isinstance(v, int):  # steps, counts: whole, never 1.234e+04
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        if key == "window" and len(v) == 2:
            return f"{_show('', v[0])} to {_show('', v[1])}"
        shown = ", ".join(_show("", x) for x in v[:MAX_LISTED])
        return shown + (" …" if len(v) > MAX_LISTED else "")
    if key == "since" and v == "earlier":
        return "the window's early half"
    return str(v)[:200]


def evidence_rows(evidence: Any) -> list[dict[str, str]]:
    """An alert's evidence as ``{"label", "key", "value"}`` lines: numbers to 4
    significant digits, lists of numbers joined, the rest as text."""
    if not isinstance(evidence, dict):
        return []
    return [
        {"label": label(str(k)), "key": str(k), "value": _show(str(k), v)}
        for k, v in evidence.items()
    ]


# A number in a reason ("2 tokens (0.4x the early mean)", "entropy 1.166 nats/token"):
# reasons alike but for their numbers are one line, each number as its range.
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _ranged(reasons: list[str]) -> str:
    """Reasons of one shape as one: each number the range of its values ("2-3
    tokens (0.4-0.6x the early mean), not solved", with an en dash)."""
    slots = [NUMBER.findall(r) for r in reasons]
    parts = NUMBER.split(reasons[0])
    out = [parts[0]]
    for i, rest in enumerate(parts[1:]):
        seen = sorted({s[i] for s in slots}, key=lambda x: (float(x), x))
        out.append(seen[0] if len(seen) == 1 else f"{seen[0]}\u2013{seen[-1]}")
        out.append(rest)
    return "".join(out)


def by_reason(refs: Any) -> list[dict[str, Any]]:
    """An alert's evidence rollouts under each reason, once, in the order the
    reasons first appear: ``[{"why", "count", "groups": [{"group", "refs"}]}]``, a
    group's rollouts together ("group 1 #0, #2"). Reasons alike but for their
    numbers share a line, its numbers as ranges (28 rollouts' "entropy 1.166
    nats/token" ... were 28 lines; each rollout's own reason is its link's title).
    A rollout without a reason is listed under ``why`` "" (an older alert, a
    plugin's detector)."""
    shapes: dict[str, list[dict[str, Any]]] = {}
    for t in refs or ():
        if isinstance(t, dict):
            why = str(t.get("why") or "")
            shapes.setdefault(NUMBER.sub("#", why), []).append(t)
    out = []
    for alike in shapes.values():
        groups: dict[Any, list[Any]] = {}
        for t in alike:
            groups.setdefault(t.get("group"), []).append(t)
        out.append(
            {
                "why": _ranged([str(t.get("why") or "") for t in alike]),
                "count": len(alike),
                "groups": [{"group": g, "refs": v} for g, v in groups.items()],
            }
        )
    return out
