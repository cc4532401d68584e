"""miles's ``--dump-details`` directory -> our events (checked against radixark/miles
at 31f1ca9).

* ``dashboard/metrics.jsonl``: with ``--use-miles-dashboard`` the collector appends
  one ``MetricsRecord`` per ``tracking.log`` call (miles/dashboard/store.py):
  ``{"ts", "step_key", "step", "metrics"}``. ``step_key`` names the axis:
  ``rollout/step`` (the rollout id, miles/utils/metric_utils.py
  ``compute_rollout_step``), ``eval/step``, or ``train/step`` (optimizer steps,
  ``rollout_id * num_steps_per_rollout + step_id``, mapped back to the rollout with
  ``rollout_batch_size * n_samples_per_prompt // global_batch_size`` from
  ``dashboard/meta.json``'s ``args``).
* ``rollout_data/<rollout_id>.pt``: ``save_debug_rollout_data``
  (miles/ray/rollout/debug_data.py), ``torch.save({"rollout_id", "metadata",
  "samples": [Sample.to_dict()]})``: per sample ``index``, ``group_index``,
  ``prompt``, ``response``, ``tokens``, ``response_length``, ``reward``,
  ``loss_mask``, ``rollout_log_probs`` (the sampler's), ``weight_versions``,
  ``status``.
* ``train_data/<rollout_id>_<rank>.pt``: ``save_debug_train_data_for_rank``
  (miles/utils/train_dump_utils.py), ``{"rollout_id", "rank", "rollout_data",
  "cp_rank", "cp_size"}`` where ``rollout_data`` holds per-row ``sample_indices``
  and response-aligned tensors ``log_probs`` (the trainer's), ``rollout_log_probs``,
  ``entropy`` (``--use-rollout-entropy``), ``advantages``, and where the run has
  them ``ref_log_probs`` (a KL term), ``ref_entropy`` and ``returns`` (kept as the
  action segment's ``series`` under those names). Joined by
  ``sample_indices`` as miles's own ``DumpReader.load_joined`` does; a context-
  parallel shard (``cp_size > 1``) holds a slice, so its arrays are left out.

Files are loaded by :func:`trainer.importers.torch_dumps.load_plain`: tensors, numpy
arrays of numbers (MoE routing replay's ``rollout_routed_experts``, not imported) and
plain containers, never arbitrary pickled code (a dump holding any other object is
refused, naming the file and the object). A trajectory is one sample: a ``prompt``
segment (the prompt tokens) and an ``action`` segment (the response tokens with
``logprob`` the trainer's, ``old_logprob`` the sampler's, ``ratio``, ``entropy``,
``advantage``).

Staleness per sample (``off_policy/staleness``) is miles's data buffer's
(miles/rollout/fully_async_data_buffer.py ``_staleness``): the engine's weight version
when the batch was taken minus the sample's oldest (``Sample.oldest_weight_version``).
The dump does not record the former, so it is the newest version any sample of the
rollout carries: exact for ``train.py`` and ``train_async.py`` without
``--fully-async`` (each rollout generated whole between two weight pushes), a lower
bound with it (a batch may hold only older groups; the step's chart then shows miles's
own ``rollout/fully_async/avg_staleness``). Not ``rollout_id - oldest`` (miles's
dashboard, dump_reader.py): the version counter starts at 1 with the push before
rollout 0 (train.py ``update_weights()`` then ``weight_version += 1``), so that reads
-1 for every sample of an on-policy run, and it restarts at 1 when a run resumes
while rollout ids go on.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from trainer.importers.shapes import (
    TrajectoryRow,
    chat_text,
    grpo_advantages,
    step_events,
    token_segment,
    trajectory_event,
)
from trainer.importers.tailing import BadImportFile, JsonlTail, Settled
from trainer.importers.torch_dumps import load_plain

ROLLOUT = re.compile(r"^(\d+)\.pt$")
TRAIN = re.compile(r"^(\d+)_(\d+)\.pt$")
# Response-aligned per-token tensors of a train dump (dump_reader.py TrainRow): ours
# by meaning, and the others, kept under miles's names as the segment's series.
OURS = ("log_probs", "rollout_log_probs", "entropy", "advantages")
SERIES = ("ref_log_probs", "returns", "ref_entropy")
TOKEN_FIELDS = (*OURS, *SERIES)


def _floats(value: Any) -> list[float] | None:
    if value is None:
        return None
    return [float(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]


def train_rows(packs: list[dict[str, Any]]) -> dict[int, dict[str, list[float]]]:
    """sample index -> its per-token train fields (from shards of one rollout)."""
    out: dict[int, dict[str, list[float]]] = {}
    for pack in packs:
        if int(pack.get("cp_size") or 1) != 1:
            continue  # a cp slice, not the whole response
        data = pack.get("rollout_data") or {}
        for row, index in enumerate(data.get("sample_indices") or []):
            fields = out.setdefault(int(index), {})
            for name in TOKEN_FIELDS:
                values = data.get(name)
                if values is not None and name not in fields:
                    fields[name] = _floats(values[row])
    return out


def _versions(sample: dict[str, Any]) -> list[int]:
    """The weight versions of a sample's turns that are numbers (miles's own
    reading: ``Sample.oldest_weight_version``)."""
    return [int(v) for v in sample.get("weight_versions") or [] if str(v).isdigit()]


def _staleness(newest: int | None, sample: dict[str, Any]) -> float | None:
    versions = _versions(sample)
    if newest is None or not versions:
        return None
    return float(newest - min(versions))


def _ratio(train: list[float] | None, sampler: list[float] | None) -> list | None:
    if not train or not sampler or len(train) != len(sampler):
        return None
    return [math.exp(a - b) for a, b in zip(train, sampler, strict=True)]


def sample_row(
    rollout_id: int, sample: dict[str, Any], place: tuple[int, int], ctx: dict
) -> TrajectoryRow:
    tokens = [int(t) for t in sample.get("tokens") or []]
    n = int(sample.get("response_length") or 0)
    prompt_ids, response_ids = tokens[: len(tokens) - n], tokens[len(tokens) - n :]
    train = ctx["train"].get(int(sample.get("index", -1)), {})
    sampler = train.get("rollout_log_probs") or _floats(sample.get("rollout_log_probs"))
    arrays = {
        "logprob": train.get("log_probs"),
        "old_logprob": sampler,
        "ratio": _ratio(train.get("log_probs"), sampler),
        "entropy": train.get("entropy"),
        "advantage": train.get("advantages"),
    }
    arrays |= {k: train.get(k) for k in SERIES}
    arrays = {k: v if v and len(v) == n else None for k, v in arrays.items()}
    series = {k: arrays.pop(k) for k in SERIES}
    prompt = chat_text(sample.get("prompt"))
    reward, components = ctx["rewards"][place]
    stale = _staleness(ctx["newest"], sample)
    adv = arrays["advantage"]
    mask = sample.get("loss_mask") or [1] * n
    trained = [a for a, m in zip(adv or [], mask, strict=False) if m]
    return TrajectoryRow(
        step=rollout_id,
        group=place[0],
        index=place[1],
        prompt=prompt,
        segments=[
            token_segment("prompt", prompt, prompt_ids, {}, mask="prompt"),
            token_segment(
                "action",
                str(sample.get("response") or ""),
                response_ids,
                arrays,
                series=series,
            ),
        ],
        reward=reward,
        advantage=sum(trained) / len(trained) if trained else ctx["advantages"][place],
        components=components,
        length=n,
        truncated=sample.get("status") == "truncated",
        facts={
            "source": "miles",
            "sample_index": sample.get("index"),
            "status": sample.get("status"),
            "label": sample.get("label"),
            "weight_versions": list(sample.get("weight_versions") or []),
        },
        metrics={} if stale is None else {"off_policy/staleness": stale},
    )


def _reward(sample: dict[str, Any], key: str | None) -> tuple[float, dict[str, float]]:
    value = sample.get("reward")
    if isinstance(value, dict):
        parts = {
            k: float(v)
            for k, v in value.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if key in parts:
            return parts[key], parts
        # miles's dashboard args never record --reward-key: a lone number is the
        # reward, else the usual names; a dict of several others stays NaN (named).
        if len(parts) == 1:
            return next(iter(parts.values())), parts
        for name in ("reward", "score", "acc", "accuracy"):
            if name in parts:
                return parts[name], parts
        return math.nan, parts
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), {}
    return math.nan, {}


def rollout_events(
    rollout_id: int, pack: dict[str, Any], train: dict, args: dict[str, Any]
) -> list[dict[str, Any]]:
    samples = [s for s in pack.get("samples") or [] if isinstance(s, dict)]
    groups: dict[Any, int] = {}
    counts: list[int] = []
    places = []
    for n, sample in enumerate(samples):
        key = sample.get("group_index")
        key = f"#{n}" if key is None else key
        groups.setdefault(key, len(groups))
        if groups[key] == len(counts):
            counts.append(0)
        places.append((groups[key], counts[groups[key]]))
        counts[groups[key]] += 1
    rewards = {
        p: _reward(s, args.get("reward_key"))
        for p, s in zip(places, samples, strict=True)
    }
    computed = grpo_advantages([rewards[p][0] for p in places], [g for g, _ in places])
    newest = max((v for s in samples for v in _versions(s)), default=None)
    ctx = {
        "newest": newest,
        "train": train,
        "rewards": rewards,
        "advantages": dict(zip(places, computed, strict=True)),
    }
    return [
        trajectory_event(sample_row(rollout_id, s, p, ctx))
        for p, s in zip(places, samples, strict=True)
    ]


class MilesReader:
    """Reads a miles ``--dump-details`` directory; :meth:`poll` returns events not
    returned before, so calling it repeatedly tails a live run. A rollout's samples
    wait (while tailing) until its train shards are written, so they carry the
    trainer's arrays (the first write of a trajectory is the one kept)."""

    framework = "miles"

    def __init__(self, dump_dir: str | Path) -> None:
        self.dump_dir = Path(dump_dir)
        self.last_step = 0
        self._metrics = JsonlTail(self.dump_dir / "dashboard" / "metrics.jsonl")
        self._files = Settled()
        self._derived: dict[int, dict[str, float]] = {}
        self._rollout_seen = 0  # the last rollout id of a rollout/step record

    @property
    def meta(self) -> dict[str, Any]:
        path = self.dump_dir / "dashboard" / "meta.json"
        if not path.is_file():
            return {}
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise BadImportFile(f"{path}: not JSON: {exc}") from None
        return meta if isinstance(meta, dict) else {}

    @property
    def args(self) -> dict[str, Any]:
        args = self.meta.get("args")
        return args if isinstance(args, dict) else {}

    def config(self) -> dict[str, Any]:
        meta = self.meta
        return {"source": "miles", "dump_dir": str(self.dump_dir), **meta}

    def _steps_per_rollout(self) -> int | None:
        """Optimizer steps a rollout (``train/step = rollout_id * N + i``), when the
        args say (miles's own dashboard args do not record ``global_batch_size``,
        and N varies with dynamic batching): None, else."""
        a = self.args
        try:
            size = a["rollout_batch_size"] * a["n_samples_per_prompt"]
            return max(1, int(size // a["global_batch_size"]))
        except (KeyError, TypeError, ZeroDivisionError):
            return None

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        events = self._rollouts(settle, waiting=True)
        per = self._steps_per_rollout()
        rows = []
        for record in self._metrics.read():
            step, metrics = record.get("step"), record.get("metrics")
            if not isinstance(step, int) or not isinstance(metrics, dict):
                continue
            if record.get("step_key") == "train/step":
                # Without N: the rollout whose metrics came last (miles logs a
                # rollout's, then trains on it).
                step = step // per if per else self._rollout_seen
            elif record.get("step_key") == "rollout/step":
                self._rollout_seen = step
            rows.append((step, metrics))
        derived = {s: self._derived.pop(s) for s, _ in rows if s in self._derived}
        events += step_events(self.framework, rows, derived)
        for event in events:
            self.last_step = max(self.last_step, event["step"])
        return events

    def flush(self) -> list[dict[str, Any]]:
        out = self._rollouts(settle=False, waiting=False)
        out += [
            {"type": "step", "step": s, "metrics": m}
            for s, m in sorted(self._derived.items())
        ]
        self._derived.clear()
        return out

    def _rollouts(self, settle: bool, *, waiting: bool) -> list[dict[str, Any]]:
        rollout_dir, train_dir = (
            self.dump_dir / "rollout_data",
            self.dump_dir / "train_data",
        )
        shards: dict[int, list[Path]] = {}
        for path in train_dir.glob("*.pt") if train_dir.is_dir() else []:
            if match := TRAIN.match(path.name):
                shards.setdefault(int(match.group(1)), []).append(path)
        out = []
        for path in sorted(rollout_dir.glob("*.pt") if rollout_dir.is_dir() else []):
            match = ROLLOUT.match(path.name)  # eval_<id>.pt is not training data
            if match is None or self._files.done(path):
                continue
            rid = int(match.group(1))
            mine = sorted(shards.get(rid, []))
            ready = [self._files.ready(p, settle=settle) for p in [path, *mine]]
            if waiting and not (mine and all(ready)):
                continue
            pack = load_plain(path)
            train = train_rows([load_plain(p) for p in mine])
            self._files.take(path)
            events = rollout_events(rid, pack, train, self.args)
            values = [
                e["metrics"]["off_policy/staleness"] for e in events if e["metrics"]
            ]
            if values:
                self._derived[rid] = {
                    "off_policy/staleness": sum(values) / len(values),
                    "off_policy/staleness_max": max(values),
                }
            out += events
        return out
