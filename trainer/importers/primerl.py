"""prime-rl's run directory -> our events (checked against PrimeIntellect-ai/prime-rl
at 559b447 and its verifiers submodule at a60a606).

The layout, all under the run directory (``output_dir / run.name``, shared by the
trainer and the orchestrator):

* ``metrics.jsonl``: ``FileMonitor.log_metrics`` (src/prime_rl/monitors/file.py)
  appends ``{"step": N, "time": t, name: value, ...}`` per log call, line-buffered,
  from both processes: several lines per step (the trainer's perf, optim, tensor
  stats and timings; the orchestrator's rollout stats and ``off_policy/*``).
  Non-finite values are dropped by the writer.
* ``rollouts/step_N/train/effective/traces.jsonl``: ``FileMonitor.log_episodes``
  writes one ``vf.Episode.to_record()`` per line (verifiers/v1/episode.py) for the
  batch the trainer consumed at step N: ``id``, ``env`` (``id``, ``name``), ``task``,
  ``group`` (``id``), ``run`` (``work``: ``step``, ``policy``: ``start``, ``end``),
  ``ok``, ``errors`` and ``traces``; a trace (verifiers/v1/trace.py) has ``agent``
  (``name``, ``trainable``), ``rewards`` ({name: {score, weight}}), ``metrics``,
  ``calls`` and ``nodes``, a message graph: each node a ``message`` (role,
  content), its ``parent`` node, its ``token_ids``, per-token ``mask`` (sampled
  tokens), and over the sampled tokens only ``logprobs`` (the sampler's),
  ``advantages`` and ``reference_logprobs``. The ``all`` subset (every
  completed episode, failures included) is not imported: ``effective`` is what
  trained.
* ``token_exports/step_N/rank_R.jsonl`` (``trainer.enable_token_export``,
  src/prime_rl/trainer/rl/token_export.py): per trained sequence (one branch of a
  trace), aligned per-token ``token_ids``, ``loss_mask``, ``advantages``,
  ``inference_logprobs``, ``trainer_logprobs``, ``entropy``, ``mismatch_kl``,
  ``log_importance_ratio``, ``importance_ratio``, ``prob_delta``, ``is_masked*``
  and the loss weight streams; a ``STABLE`` file marks the step complete. A
  sequence is joined to its branch by its token ids.

The issue that asked for this named ``monitors/file/metrics.jsonl`` and
``traces/stream.jsonl``: neither path exists in prime-rl (its FileMonitor writes the
two above, and no ``stream.jsonl`` appears in its history we could read).

A trajectory is one episode, its traces' message graphs read branch by branch as
segments with every per-token array (:mod:`trainer.importers.primerl_traces`, which
says why a branched episode stays one trajectory), reward the sum of its trainable
traces' weighted rewards (components ``<reward name>``, ``<agent>/<reward name>`` with
several agents), advantage prime-rl's own scalar (the mean non-zero token
advantage, orchestrator/algo/routing.py ``scalar_advantage``) and, as the metric
``off_policy/staleness``, prime-rl's ``episode_staleness``: ``(N - 1) -
policy.start``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from trainer.importers.primerl_traces import episode_segments
from trainer.importers.shapes import TrajectoryRow, step_events, trajectory_event
from trainer.importers.tailing import (
    BadImportFile,
    JsonlTail,
    Settled,
    read_jsonl_file,
)

STEP_DIR = re.compile(r"step_(\d+)$")


def scalar_advantage(nodes: list[dict[str, Any]]) -> float:
    values = [v for n in nodes for v in n.get("advantages") or []]
    nonzero = [v for v in values if v != 0.0]
    return sum(nonzero) / len(nonzero) if nonzero else 0.0


def _reward(trace: dict[str, Any], prefix: str) -> dict[str, float]:
    out = {}
    for name, r in (trace.get("rewards") or {}).items():
        if isinstance(r, dict) and isinstance(r.get("score"), (int, float)):
            out[prefix + name] = float(r["score"]) * float(r.get("weight", 1.0))
    return out


def staleness(episode: dict[str, Any], step: int) -> float | None:
    policy = ((episode.get("run") or {}).get("work") or {}).get("policy")
    if not isinstance(policy, dict) or not isinstance(policy.get("start"), int):
        return None
    return float(max(0, (step - 1) - policy["start"]))


def episode_row(
    step: int, place: tuple[int, int], episode: dict[str, Any], exports: dict
) -> TrajectoryRow:
    traces = [t for t in episode.get("traces") or [] if isinstance(t, dict)]
    trainable = [t for t in traces if (t.get("agent") or {}).get("trainable", True)]
    several = len(traces) > 1
    components = {}
    for trace in trainable:
        agent = str((trace.get("agent") or {}).get("name", "agent"))
        components.update(_reward(trace, f"{agent}/" if several else ""))
    walk = episode_segments(traces, exports)
    first = next(iter(trainable), {})
    nodes = [n for n in first.get("nodes") or [] if isinstance(n, dict)]
    prompt = next((s["text"] for s in walk.segments if s["kind"] == "prompt"), "")
    stale = staleness(episode, step)
    task = episode.get("task") or {}
    facts = {
        "source": "prime-rl",
        "episode_id": episode.get("id"),
        "env": (episode.get("env") or {}).get("id"),
        "group_id": (episode.get("group") or {}).get("id"),
        "ok": episode.get("ok"),
    }
    if walk.branched:
        facts["branches"] = walk.branches
    return TrajectoryRow(
        step=step,
        group=place[0],
        index=place[1],
        prompt=prompt,
        segments=walk.segments,
        reward=sum(components.values()),
        advantage=scalar_advantage(nodes),
        components=components,
        task_id=str(task.get("key") or task.get("hash") or "")[:200] or None,
        length=walk.sampled,
        num_turns=walk.turns,
        facts=facts,
        metrics={} if stale is None else {"off_policy/staleness": stale},
    )


def places(episodes: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(group, index) of each episode: groups numbered by first appearance of their
    ``group.id`` (an ungrouped episode is a group of its own)."""
    groups: dict[str, int] = {}
    counts: list[int] = []
    out = []
    for n, episode in enumerate(episodes):
        key = str((episode.get("group") or {}).get("id") or f"#{n}")
        if key not in groups:
            groups[key] = len(groups)
            counts.append(0)
        g = groups[key]
        out.append((g, counts[g]))
        counts[g] += 1
    return out


class PrimeRlReader:
    """Reads a prime-rl run directory; :meth:`poll` returns events not returned
    before, so calling it repeatedly tails a live run. With token exports on (a
    ``token_exports/`` directory), a step's trajectories wait for that step's
    ``STABLE`` marker so they carry the trainer's arrays (the first write of a
    trajectory is the one kept)."""

    framework = "prime-rl"

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.last_step = 0
        self._metrics = JsonlTail(self.run_dir / "metrics.jsonl")
        self._files = Settled()
        # step -> token ids -> the trainer's export of that sample: a prompt and
        # answer seen at two steps (an epoch later) keep each step's own arrays.
        self._exports: dict[int, dict[tuple[int, ...], dict[str, Any]]] = {}
        self._exported: set[int] = set()

    def config(self) -> dict[str, Any]:
        """``configs/rl.json`` (the SLURM launcher writes it) or, for a local run,
        ``configs/{trainer,orchestrator,inference}.json``, each under its name."""
        config: dict[str, Any] = {"source": "prime-rl", "run_dir": str(self.run_dir)}
        for name in ("rl", "trainer", "orchestrator", "inference"):
            path = self.run_dir / "configs" / f"{name}.json"
            if path.is_file():
                try:
                    config[name] = json.loads(path.read_text(encoding="utf-8"))
                except ValueError as exc:
                    raise BadImportFile(f"{path}: not JSON: {exc}") from None
        return config

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        self._read_exports()
        events = self._rollouts(settle, waiting=True)
        rows = []
        for row in self._metrics.read():
            if isinstance(row.get("step"), int):
                data = {k: v for k, v in row.items() if k not in ("step", "time")}
                rows.append((row["step"], data))
        events += step_events(self.framework, rows)
        for event in events:
            self.last_step = max(self.last_step, event["step"])
        return events

    def flush(self) -> list[dict[str, Any]]:
        """Steps still waiting for their token exports, sent without them."""
        return self._rollouts(settle=False, waiting=False)

    def _step_dirs(self, root: Path) -> dict[int, Path]:
        found = {}
        for path in root.glob("step_*") if root.is_dir() else []:
            if match := STEP_DIR.search(path.name):
                found[int(match.group(1))] = path
        return dict(sorted(found.items()))

    def _read_exports(self) -> None:
        for step, path in self._step_dirs(self.run_dir / "token_exports").items():
            if step in self._exported or not (path / "STABLE").exists():
                continue
            found = self._exports.setdefault(step, {})
            for file in sorted(path.glob("rank_*.jsonl")):
                for record in read_jsonl_file(file) or []:
                    found[tuple(record.get("token_ids") or ())] = record
            self._exported.add(step)

    def _rollouts(self, settle: bool, *, waiting: bool) -> list[dict[str, Any]]:
        exporting = (self.run_dir / "token_exports").is_dir()
        out = []
        for step, path in self._step_dirs(self.run_dir / "rollouts").items():
            file = path / "train" / "effective" / "traces.jsonl"
            if waiting and exporting and step not in self._exported:
                continue
            if not self._files.ready(file, settle=settle):
                continue
            episodes = read_jsonl_file(file)
            if episodes is None:
                continue
            self._files.take(file)
            exports = self._exports.pop(step, {})  # read once, then let go
            for line, (place, episode) in enumerate(
                zip(places(episodes), episodes, strict=True), 1
            ):
                try:
                    row = episode_row(step, place, episode, exports)
                except BadImportFile as exc:
                    raise BadImportFile(f"{file}: line {line}: {exc}") from None
                out.append(trajectory_event(row))
        return out
