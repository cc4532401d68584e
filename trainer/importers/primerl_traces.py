"""One prime-rl episode (verifiers' ``Episode.to_record()``) -> one trajectory, its
message graph read branch by branch (checked against verifiers a60a606 and prime-rl
559b447).

A trace's ``nodes`` are a graph (verifiers/v1/graph.py ``MessageNode``): each node one
message and the tokens it adds, ``parent`` the index of the message before it (absent
for a root: the record drops None). A conversation is a path from a root to a leaf;
several leaves are several branches (a compaction, a fork mid-trajectory), and
``Trace.branches`` walks each leaf back to its root, leaves in node order. prime-rl
trains each branch as one sample (orchestrator/trajectories.py ``trace_to_samples``),
a sampled node shared by several branches in the first of them only
(``iter_trainable_branches``); its token export holds one record per sample.

A branched episode stays one trajectory, its tree kept: the first branch whole, then
each later one from where it leaves the branches before it (the shared messages are
shown once, where prime-rl trains them), each segment naming its ``branch`` and the
trajectory's ``facts["branches"]`` saying which branch each forks from and after how
many messages. Not a trajectory per branch, because the reward, the advantage and the
GRPO group are the episode's: as trajectories of their own, branches would count as
siblings in the group (its reward spread, the group browser, the detectors) and repeat
one reward. Comparing branches is then reading down one page with one colour scale,
each branch with its own trainer arrays (its sample's token export, joined by the
branch's token ids).

A segment per node: ``prompt`` before the episode's first sampled answer, ``action``
for a sampled assistant message (each opens a turn), ``tool`` for any other message
after it (an observation, or the context a later branch or agent starts from); over
the sampled tokens the sampler's ``old_logprob`` and ``advantage``; with the export,
the trainer's ``logprob``, ``entropy``, ``ratio`` and ``advantage``, its other
per-token columns (``mismatch_kl``, ``log_importance_ratio``, ``prob_delta``,
``is_masked``, ``is_masked_high``, ``is_masked_low``, the loss weight streams: those
with a value on the segment's tokens) as ``series``, and ``masked`` naming the tokens of a trained message left out of the
loss (``not_sampled``: template scaffold; ``trust_region``: ``is_masked``, prime-rl's
DPPO mask). A node's ``reference_logprobs`` is a series too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.importers.shapes import token_segment
from trainer.importers.tailing import BadImportFile

# The token export's columns (src/prime_rl/trainer/rl/token_export.py
# _export_columns): ours by meaning; every other per-token column is kept under
# prime-rl's name, but for the join key, positions, the loss mask (the segments'
# masks say it) and the sampler's log-probs (the nodes' own, ``old_logprob``).
EXPORT_OURS = {
    "trainer_logprobs": "logprob",
    "entropy": "entropy",
    "importance_ratio": "ratio",
    "advantages": "advantage",
}
NOT_SERIES = frozenset(
    {"token_ids", "position_ids", "loss_mask", "inference_logprobs", *EXPORT_OURS}
)


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict)
        )
    text = str(content or message.get("reasoning_content") or "")
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict):
            text += f"\n<tool_call>{call.get('name', '')} {call.get('arguments', '')}"
    return text


def spread(mask: list[bool], values: Any) -> list[float | None] | None:
    """A node's compact per-sampled-token values on every token (None elsewhere)."""
    if not isinstance(values, list):
        return None
    it = iter(values)
    return [next(it, None) if sampled else None for sampled in mask]


def paths(nodes: list[dict[str, Any]]) -> list[list[int]]:
    """Each root-to-leaf path of a trace's nodes (``Trace.branches``), leaves in node
    order. A record of several nodes none of which names a parent is one flat
    conversation (as a trace was written before the graph)."""
    parents = [node.get("parent") for node in nodes]
    if len(nodes) > 1 and all(p is None for p in parents):
        return [list(range(len(nodes)))]
    for i, p in enumerate(parents):
        if p is not None and not (type(p) is int and 0 <= p < len(nodes) and p != i):
            raise BadImportFile(f"nodes.{i}.parent: {p!r} is not a node of its trace")
    has_child = {p for p in parents if p is not None}
    out, reached = [], set()
    for leaf in range(len(nodes)):
        if leaf in has_child:
            continue
        path: list[int] = []
        at: int | None = leaf
        while at is not None:
            if at in path:
                raise BadImportFile(f"nodes.{leaf}: its parents go round in a loop")
            path.append(at)
            at = parents[at]
        out.append(path[::-1])
        reached.update(path)
    if len(reached) < len(nodes):
        lost = min(set(range(len(nodes))) - reached)
        raise BadImportFile(f"nodes.{lost}: on no path from a root (a parent loop)")
    return out


@dataclass
class Walk:
    """The segments of one episode as its traces' branches are walked."""

    branched: bool
    segments: list[dict[str, Any]] = field(default_factory=list)
    branches: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0  # sampled answers so far: the next one's turn
    sampled: int = 0  # sampled tokens


def episode_segments(
    traces: list[dict[str, Any]], exports: dict[tuple[int, ...], dict[str, Any]]
) -> Walk:
    """Every trace's branches, in order, as segments (see the module docstring)."""
    graphs = [[n for n in t.get("nodes") or [] if isinstance(n, dict)] for t in traces]
    trees = []
    for k, nodes in enumerate(graphs):
        try:
            trees.append(paths(nodes) if nodes else [])
        except BadImportFile as exc:
            raise BadImportFile(f"traces.{k}.{exc}") from None
    walk = Walk(branched=sum(len(p) for p in trees) > 1)
    for trace, nodes, tree in zip(traces, graphs, trees, strict=True):
        agent = str((trace.get("agent") or {}).get("name", "agent"))
        shown: dict[int, int] = {}  # node -> the branch that shows it
        for path in tree:
            _walk_branch(walk, nodes, path, shown, exports, agent)
    return walk


def _walk_branch(
    walk: Walk,
    nodes: list[dict[str, Any]],
    path: list[int],
    shown: dict[int, int],
    exports: dict[tuple[int, ...], dict[str, Any]],
    agent: str,
) -> None:
    ids = [int(t) for i in path for t in nodes[i].get("token_ids") or []]
    export = exports.get(tuple(ids))
    fork = next((k for k, i in enumerate(path) if i not in shown), len(path))
    branch = len(walk.branches)
    walk.branches.append(
        {
            "branch": branch,
            "agent": agent,
            "forks_from": shown[path[fork - 1]] if fork else None,
            "after_messages": fork,
            "messages": len(path),
            "trainer_arrays": export is not None,
        }
    )
    at = sum(len(nodes[i].get("token_ids") or []) for i in path[:fork])
    answered = False  # an action of this branch's own nodes so far
    for i in path[fork:]:
        node = nodes[i]
        n = len(node.get("token_ids") or [])
        part = slice(at, at + n)
        at += n
        seg = _segment(node, walk, answered, export, part)
        answered = answered or seg["kind"] == "action"
        if walk.branched:
            seg["branch"] = branch
        walk.segments.append(seg)
        shown[i] = branch


def _segment(
    node: dict[str, Any],
    walk: Walk,
    answered: bool,
    export: dict[str, Any] | None,
    part: slice,
) -> dict[str, Any]:
    message = node.get("message") or {}
    ids = [int(t) for t in node.get("token_ids") or []]
    mask = [bool(m) for m in node.get("mask") or []][: len(ids)]
    mask += [False] * (len(ids) - len(mask))
    role = str(message.get("role") or "user")
    trained = any(mask)
    if role == "assistant" and node.get("sampled", trained):
        kind, turn, reason = "action", walk.turns, None if trained else "not_sampled"
        walk.turns += 1
    elif walk.turns == 0:
        kind, turn, reason = "prompt", 0, "prompt"
    else:  # an observation of the last answer, or the context of the next one
        kind, reason = "tool", role
        turn = walk.turns - 1 if answered else walk.turns
    walk.sampled += sum(mask)
    arrays: dict[str, Any] = {
        "old_logprob": spread(mask, node.get("logprobs")),
        "advantage": spread(mask, node.get("advantages")),
    }
    series: dict[str, Any] = {
        "reference_logprobs": spread(mask, node.get("reference_logprobs"))
    }
    masked = [[k, "not_sampled"] for k, m in enumerate(mask) if trained and not m]
    if export is not None:
        for theirs, ours in EXPORT_OURS.items():
            arrays[ours] = _column(export, theirs, part, len(ids))
        for name in export:
            if name not in NOT_SERIES and _per_token(export[name], export):
                series[name] = _column(export, name, part, len(ids))
        flags = _column(export, "is_masked", part, len(ids)) or []
        masked += [[k, "trust_region"] for k, f in enumerate(flags) if f and mask[k]]
    seg = token_segment(
        kind, message_text(message), ids, arrays, mask=reason, series=series
    )
    seg["turn"] = turn
    if masked:
        seg["masked"] = sorted(masked)
    return seg


def _per_token(values: Any, export: dict[str, Any]) -> bool:
    """A column of a number (or flag, or None) per token of the record."""
    return (
        isinstance(values, list)
        and len(values) == len(export.get("token_ids") or [])
        and all(v is None or isinstance(v, (int, float)) for v in values)
    )


def _column(export: dict[str, Any], name: str, part: slice, n: int) -> list | None:
    """A node's slice of one export column (None where the column is not whole)."""
    values = export.get(name)
    if not isinstance(values, list):
        return None
    cut = values[part]
    return cut if len(cut) == n else None
