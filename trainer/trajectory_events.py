"""Event payloads: a rollout plus its numbers -> the dicts the sink receives.

Token arrays are aligned with the trajectory's tokens: entry ``k`` of a segment describes
that segment's ``k``-th token. A value that does not exist is ``None`` (JSON ``null``):
the first token of a trajectory (nothing predicts it) and every token of a dropped
group (never scored). NaN is kept for what it means, a computed number that is not one.
Tensors are turned into Python lists once per batch.
"""

from __future__ import annotations

import math
from typing import Any

from rewards.types import RewardResult
from trainer.chat import ROLE_OF_KIND
from trainer.rollout import Rollout, Segment
from trainer.token_text import TokenView

FLOAT_ARRAYS = ("logprob", "old_logprob", "ratio", "entropy", "advantage")


def trajectory_event(
    step: int,
    ro: Rollout,
    result: RewardResult,
    *,
    dropped: bool,
    advantage: float,
    tokens: TokenView | list[str] | None,
    texts: list[str],
    arrays: dict[str, list[float]] | None,
) -> dict[str, Any]:
    """``tokens`` are the whole trajectory's tokens (raw pieces, readable text,
    special tokens and chat turns), ``texts`` each
    segment's decoded text. ``arrays`` maps name -> per-target values (length T-1 of
    this row, unpadded); None for a dropped group (never scored by the learner).
    ``tokens`` None (the recording policy keeps no token arrays): each segment says
    its text and token count ``n`` only. ``arrays["masked"]`` (optional): [[target,
    reason]] of single tokens the update left out; each segment then carries
    ``masked``: [[position in the segment, reason]] (e.g. ``is_ratio``,
    ``low_entropy``)."""
    segments = (
        [_text_segment(seg, text) for seg, text in zip(ro.segments, texts, strict=True)]
        if tokens is None
        else _token_segments(
            ro,
            texts,
            tokens if isinstance(tokens, TokenView) else TokenView.of_pieces(tokens),
            arrays,
        )
    )
    ep = ro.episode
    bd = result.breakdown
    return {
        "type": "trajectory",
        "step": step,
        "group": ro.group,
        "index": ro.index,
        "task_id": ro.task.id,
        "dropped": dropped,
        "reward": float(bd.total),
        "advantage": float(advantage),
        "rewards": {
            "total": float(bd.total),
            "components": {k: float(v) for k, v in bd.components.items()},
            "per_step": {k: [float(x) for x in v] for k, v in bd.per_step.items()},
        },
        "num_turns": ro.num_turns,
        "length": ro.action_tokens,
        "truncated": ro.truncated,
        "facts": dict(ep.facts) if ep is not None else {},
        "steps": agent_steps(ep),
        "segments": segments,
    }


def agent_steps(ep: Any) -> list[dict[str, Any]]:
    """An episode's agent steps as a trajectory event carries them (none without
    an episode)."""
    return [
        {
            "index": s.index,
            "tool": s.tool,
            "ok": s.ok,
            "action": s.action,
            "observation": s.observation,
            "facts": dict(s.facts),
        }
        for s in (ep.steps if ep is not None else ())
    ]


def _text_segment(seg: Segment, text: str) -> dict[str, Any]:
    return {
        "turn": seg.turn,
        "kind": seg.kind,
        "role": ROLE_OF_KIND.get(seg.kind, seg.kind),
        "text": text,
        "mask": seg.mask,
        "n": len(seg.token_ids),
    }


def _token_segments(
    ro: Rollout,
    texts: list[str],
    tokens: TokenView,
    arrays: dict[str, list[float]] | None,
) -> list[dict[str, Any]]:
    """Each segment with its token ids, pieces and readable text, and its slice of
    every array."""
    segments: list[dict[str, Any]] = []
    pos = 0
    for seg, text in zip(ro.segments, texts, strict=True):
        n = len(seg.token_ids)
        entry: dict[str, Any] = {
            "turn": seg.turn,
            "kind": seg.kind,
            "role": ROLE_OF_KIND.get(seg.kind, seg.kind),
            "text": text,
            "token_ids": list(seg.token_ids),
            **tokens.segment(pos, n),
            "mask": seg.mask,
        }
        if arrays is not None and arrays.get("masked"):
            # Target p-1 scores token p: a masked target is token pos + k here.
            entry["masked"] = [
                [t + 1 - pos, reason]
                for t, reason in arrays["masked"]
                if 0 <= t + 1 - pos < n
            ]
        if arrays is None:
            for name in FLOAT_ARRAYS:
                entry[name] = [None] * n
        elif pos == 0:  # target index p-1 scores token p; token 0 has no prediction
            for name in FLOAT_ARRAYS:
                entry[name] = [None, *arrays[name][: n - 1]][:n]
        else:
            for name in FLOAT_ARRAYS:
                entry[name] = arrays[name][pos - 1 : pos + n - 1]
        segments.append(entry)
        pos += n
    return segments


def judgement_events(
    step: int, ro: Rollout, result: RewardResult
) -> list[dict[str, Any]]:
    out = []
    for j in result.judgements:
        score = j.score if j.score is not None and math.isfinite(j.score) else None
        out.append(
            {
                "type": "judgement",
                "step": step,
                "group": ro.group,
                "index": ro.index,
                "judge": j.judge,
                "backend": j.backend,
                "ok": j.ok,
                "score": score,
                "scores": {k: float(v) for k, v in j.scores.items()},
                "rationale": j.rationale,
                "raw": j.raw,
                "error": j.error,
                "target_step": j.target_step,
            }
        )
    return out


def critical_path_event(
    step: int, ro: Rollout, result: RewardResult
) -> dict[str, Any] | None:
    cp = result.critical_path
    if cp is None:
        return None
    return {
        "type": "critical_path",
        "step": step,
        "group": ro.group,
        "index": ro.index,
        "stages": list(cp.get("stages", [])),
        "critical_steps": int(cp.get("critical_steps", 0)),
        "total_steps": int(cp.get("total_steps", 0)),
        "path": list(cp.get("path", [])),
    }


def alert_event(alert: Any) -> dict[str, Any]:
    return {
        "type": "alert",
        "step": int(alert.step),
        "detector": alert.detector,
        "severity": alert.severity,
        "message": alert.message,
        "evidence": dict(alert.evidence),
        "trajectories": [
            {"group": t.group, "index": t.index, "task_id": t.task_id, "why": t.why}
            for t in getattr(alert, "trajectories", ())
        ],
    }
