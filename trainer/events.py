"""The sink protocol: how the trainer tells the world what happened, and nothing more.

The trainer calls ``sink.emit(event)`` with plain JSON-serialisable dicts; a sink never
influences training. :class:`NullSink` drops everything (the default, like nanochat's
DummyWandb); :class:`JsonlSink` writes one event per line (:func:`encode_event`),
:class:`TeeSink` fans out to several sinks, ``trainer.httpsink.HttpSink`` streams to a
dashboard. The platform's ``RunSink`` (in ``dashboard``) persists and streams them.

The same lines are the format of ``events.jsonl``, of the worker's sink and of the
dashboard's HTTP ingest; :mod:`trainer.event_schema` states them as a typed schema
(served as JSON Schema at ``/api/events/schema.json``) that the dashboard checks every
posted line against.

Event shapes (``type`` is always present; every ``step`` is the 1-based training step):

* ``{"type": "run_started", "config": {...}, "start_step": int, "num_params": int,
  "device": str}``
* ``{"type": "step", "step": int, "metrics": {name: float}}``: metric names follow
  TRL/verl (``reward``, ``reward_std``, ``rewards/<component>/mean``,
  ``frac_reward_zero_std``, ``advantages/mean|min|max``,
  ``clip_ratio/low_mean|high_mean|region_mean``, ``kl``, ``entropy``, ``policy_loss``,
  ``grad_norm``, ``completions/mean_length``, ``num_turns``, ``tools/call_frequency``,
  ``timing_s/gen|reward|update|step``, ``perf/tokens_per_s``) plus ours
  (``critical_steps/mean``, ``parallelism/mean``, ``groups_dropped``, and
  ``timing_s/records``: building this step's records, present when a sink listens). Values may be
  NaN or inf; consumers must store them safely.
* ``{"type": "trajectory", "step", "group", "index", "task_id", "dropped": bool,
  "reward": float, "advantage": float, "rewards": {"total", "components": {name: v},
  "per_step": {name: [v per agent step]}, "weights": {name: w} (optional: the
  components are another trainer's raw scores, TRL's reward functions, and the total
  is their sum weighted by these; without it the components add up to the total)},
  "num_turns": int, "length": int,
  "truncated": bool, "facts": {...}, "metrics": {name: float} (optional: this
  trajectory's numbers, e.g. ``parallelism``, ``judge/score``, that the server's
  detectors read to name an alert's evidence), "segments": [segment, ...]}`` where a
  segment is
  ``{"turn": int, "kind": "prompt"|"action"|"tool"|"subagent", "role":
  "user"|"assistant"|"tool" (the chat role of the kind), "text": str,
  "token_ids": [int], "tokens": [str] (the tokenizer's pieces), "token_text": [str]
  (what each token adds to the decoded text: ``" hello"``, not ``"Ġhello"``; a
  character split over tokens shows with the token completing it), "special": [int]
  (positions of special tokens), "turns": [[int, role]] (where a chat message opens),
  "logprob": [float|None], "old_logprob": [...],
  "ratio": [...], "entropy": [...], "advantage": [...], "mask": str|None}``;
  ``"branch": int`` (optional): the branch of a branched conversation (a message
  graph with several leaves, as prime-rl's traces) the segment belongs to, each
  branch after the first holding only what it adds, the tree in ``facts["branches"]``;
  ``"series": {name: [float|None]}`` (optional, at most 16): per-token arrays another
  trainer keeps beyond these, aligned to the tokens, under its own names (an
  imported prime-rl run's ``mismatch_kl``, ``log_importance_ratio``, ``is_masked``;
  miles's ``ref_log_probs``, ``returns``; flags as 1/0);
  ``mask`` is the loss-mask reason (None: trained on); ``"masked": [[int, str]]``
  (optional) names single tokens of a trained segment the update left out, by
  position in the segment and reason (``is_ratio``: masked importance sampling,
  ``low_entropy``: ``top_entropy_quantile``). Token arrays of masked
  segments hold the policy's view too; ``None`` where no value exists (the
  trajectory's first token, which nothing predicts, and every token of a dropped
  group, which the learner never scored).
* ``{"type": "judgement", "step", "group", "index", "judge", "backend", "ok", "score",
  "scores": {dim: v}, "rationale": str, "raw": str|None, "error": str|None,
  "target_step": int|None}``
* ``{"type": "critical_path", "step", "group", "index", "stages": [...],
  "critical_steps": int, "total_steps": int, "path": [...]}``
* ``{"type": "alert", "step", "detector", "severity", "message", "evidence": {...},
  "trajectories": [{"group", "index", "task_id", "why"}, ...]}``: the trajectories of
  the alert's step that made it fire (``rewards.evidence``; the recording policy keeps
  their groups). ``trajectories`` is optional (older events have none); the groups in
  ``evidence["group"]`` / ``evidence["groups"]`` are kept as well.
* ``{"type": "checkpoint", "step": int, "path": str}``
* ``{"type": "warmstart", "done": int, "of": int, "loss": float}``: the warm start
  before step 1 (``trainer.warmstart``) has done ``done`` of its ``of`` steps; sent
  after its first step, at least every 5 s, and after its last, so a dashboard can
  show it and a long warm start is not mistaken for a dead run (a heartbeat).
* ``{"type": "run_finished", "status": "succeeded"|"failed"|"cancelled", "step": int,
  "error": str|None}``

All strings inside events that came from the model or an environment are untrusted.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Protocol


class Sink(Protocol):
    def emit(self, event: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """Drops every event; the default."""

    def emit(self, event: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class ListSink:
    """Keeps events in memory (tests, notebooks)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def close(self) -> None:
        pass


def _json_safe(value: Any) -> Any:
    """JSON has no NaN/inf: encode them as strings a reader can map back."""
    if isinstance(value, float) and not math.isfinite(value):
        return (
            "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        )
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # Per-token arrays are long lists of floats: one C-level sum tells whether all
        # of them are finite numbers, and only otherwise is each element looked at.
        try:
            if math.isfinite(math.fsum(value)):
                return list(value)
        except (TypeError, OverflowError):
            pass
        return [_json_safe(v) for v in value]
    return value


def encode_event(event: dict[str, Any]) -> str:
    """One event as one JSON line (no newline), NaN/inf spelled as strings. The one
    encoding of events: files, the HTTP sink and the importers all use it."""
    try:  # the common case, all numbers finite: one pass of the C encoder
        return json.dumps(event, allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: spell them as strings
        return json.dumps(_json_safe(event), allow_nan=False)


class TeeSink:
    """Fans every event out to several sinks, in the order given (a file first, then
    the dashboard: the file is complete even when a later sink misbehaves).

    Sinks that write JSON lines (they have ``emit_line``: :class:`JsonlSink`,
    ``HttpSink``) get the line encoded once for all of them: encoding a step's
    trajectories with their per-token arrays is most of what a sink costs the
    trainer thread."""

    def __init__(self, *sinks: Sink) -> None:
        self.sinks = list(sinks)
        self._lines = [getattr(s, "emit_line", None) for s in self.sinks]

    def emit(self, event: dict[str, Any]) -> None:
        line = None
        for sink, emit_line in zip(self.sinks, self._lines, strict=True):
            if emit_line is None:
                sink.emit(event)
                continue
            if line is None:
                line = encode_event(event)
            emit_line(line)

    def close(self) -> None:
        errors = []
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # close the others before reporting
                errors.append(exc)
        if errors:
            raise errors[0]


class JsonlSink:
    """Appends one JSON object per line to ``path`` (flushed per event)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def emit(self, event: dict[str, Any]) -> None:
        self.emit_line(encode_event(event))

    def emit_line(self, line: str) -> None:
        """An event already encoded by :func:`encode_event`."""
        self._fh.write(line + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
