"""W&B run directories (online or offline) -> our events.

A run directory is ``wandb/run-<time>-<id>/`` (``offline-run-...`` offline) holding
the transaction log ``run-<id>.wandb`` and ``files/`` (logged media, tables among
them). The log's records are the pinned ``wandb`` package's own protobuf messages
(``wandb.proto.wandb_internal_pb2.Record``), framed as :mod:`.wandb_log` reads them:

* ``run``: id, project, entity, display name, group, tags, and the config so far;
* ``config`` / ``summary``: updates (and removals) of the config and the summary;
* ``history``: one logged row; its step is the value of a step metric the run
  defined (``define_metric("*", step_metric="train/global_step")``, as transformers'
  ``WandbCallback`` does for TRL) when the row has it, else W&B's ``_step``. Rows of
  one step become one ``step`` event: their numbers under their own names, plus ours
  (:func:`trainer.metric_names.map_metrics`, framework ``wandb``); keys starting with
  ``_`` (``_step``, ``_runtime``, ``_timestamp``) are W&B's bookkeeping, dropped;
  nested values are named ``outer.inner`` as W&B names them; a table becomes
  trajectories (:mod:`.wandb_tables`);
* ``stats``: a sample of system metrics, named ``system/<key>`` as W&B's UI names
  them, added to the step being read when it arrives;
* ``metric``: a defined step metric; ``exit``: the run ended, with its exit code.

Numbers only the summary holds (``run.summary["best"] = ...``) join the last step when
the run ends. Pure: no Django; ``wandb`` is imported only to decode records
(:class:`WandbMissing` says how to install it).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from trainer import metric_names
from trainer.importers import completions, wandb_tables
from trainer.importers.wandb_log import RecordLog

INSTALL = "pip install -r requirements-wandb.txt"
STEP_FIELD = "_step"


class WandbMissing(RuntimeError):
    """The ``wandb`` package (its protobuf messages) is not installed."""


def record_class() -> Any:
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError as exc:
        raise WandbMissing(
            f"reading W&B run directories needs the wandb package ({exc}): {INSTALL}"
        ) from None
    return wandb_internal_pb2.Record


def log_file(run_dir: Path) -> Path | None:
    logs = sorted(run_dir.glob("run-*.wandb"))
    return logs[0] if logs else None


def find_runs(path: str | Path) -> list[Path]:
    """The run directories at ``path``: itself when it holds a ``run-*.wandb``, else
    its subdirectories that do (a ``wandb/`` folder), oldest first. Links
    (``latest-run``) are skipped: they name a run listed anyway."""
    path = Path(path)
    if log_file(path) is not None:
        return [path]
    return sorted(
        (
            p
            for p in path.iterdir()
            if p.is_dir() and not p.is_symlink() and log_file(p)
        ),
        key=lambda p: p.name.split("run-", 1)[-1],
    )


def _value(item: Any) -> Any:
    """An item's value: the typed field set in its ``value`` oneof (history items of
    newer writers), else its ``value_json``."""
    try:
        which = item.WhichOneof("value")
    except ValueError:  # summary, config and stats items have no oneof
        which = None
    if which == "json":
        return json.loads(item.json)
    if which is not None:
        return None if which == "none" else getattr(item, which)
    return json.loads(item.value_json) if item.value_json else None


def _apply(tree: dict[str, Any], items: Any) -> dict[str, Any]:
    """Sets each item's value at its key (or nested key path) in ``tree``."""
    for item in items:
        path = [item.key] if item.key else list(item.nested_key)
        if not path:
            continue
        node = tree
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[path[-1]] = _value(item)
    return tree


def _remove(tree: dict[str, Any], items: Any) -> None:
    for item in items:
        path = [item.key] if item.key else list(item.nested_key)
        node = tree
        for part in path[:-1]:
            node = node.get(part) if isinstance(node.get(part), dict) else {}
        if path:
            node.pop(path[-1], None)


def flatten(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict]]:
    """(values by W&B's flat name, table references by key) of a history row or the
    summary; bookkeeping (``_``) keys and other media dropped."""
    values: dict[str, Any] = {}
    tables: dict[str, dict] = {}

    def walk(prefix: str, node: dict[str, Any]) -> None:
        for key, value in node.items():
            if key.startswith("_"):
                continue
            name = f"{prefix}{key}"
            if not isinstance(value, dict):
                values[name] = value
            elif value.get("_type") == "table-file":
                tables[name] = value
            elif "_type" not in value:
                walk(name + ".", value)

    walk("", row)
    return values, tables


class WandbReader:
    """Reads one run directory; :meth:`poll` returns the events not returned before,
    so calling it again tails a run still being written."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        path = log_file(self.run_dir)
        if path is None:
            raise ValueError(f"{self.run_dir}: no run-*.wandb transaction log here")
        self.run_id = path.stem.removeprefix("run-")
        self.info: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.exit_code: int | None = None
        self.last_step = 0
        self.missing_tables: list[str] = []
        self._Record = record_class()
        self._log = RecordLog(path)
        self._step_metrics: list[str] = []
        self._pending: tuple[int, dict[str, Any]] | None = None
        self._history_keys: set[str] = set()
        self._system: dict[str, Any] = {}
        self._groups_at: dict[int, int] = {}
        self._tables_sent: set[tuple[str, int]] = set()
        self._tables_read: set[tuple[str, int, str]] = set()  # key, step, rows' digest
        self._waiting: list[tuple[str, dict, int]] = []  # tables not on disk yet

    @property
    def finished(self) -> bool:
        return self.exit_code is not None

    def poll(self) -> list[dict[str, Any]]:
        """The events of the records completed since the last call (a record still
        being written is read on a later call)."""
        events = self._retry_tables()
        for raw in self._log.read():
            record = self._Record()
            record.ParseFromString(raw)
            events += self._record(record)
        return events

    def flush(self) -> list[dict[str, Any]]:
        """What waits for the next row: the last step (with the numbers only the
        summary holds, once the run has ended)."""
        events = self._retry_tables()
        self.missing_tables = [ref.get("path", "?") for _, ref, _ in self._waiting]
        if self.finished:
            extra = self._summary_only()
            if extra and self._pending is None:
                self._pending = (self.last_step, {})
            if self._pending is not None:
                self._pending[1].update(extra)
        if self._pending is not None:
            events.append(self._step_event(*self._pending))
            self._pending = None
        return events

    def _record(self, record: Any) -> list[dict[str, Any]]:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            return self._history(record.history)
        if kind == "run":
            self._run(record.run)
        elif kind == "config":
            _apply(self.config, record.config.update)
            _remove(self.config, record.config.remove)
        elif kind == "summary":
            _apply(self.summary, record.summary.update)
            _remove(self.summary, record.summary.remove)
        elif kind == "stats":
            for item in record.stats.item:
                self._system[f"system/{item.key}"] = _value(item)
        elif kind == "metric" and record.metric.step_metric:
            if record.metric.step_metric not in self._step_metrics:
                self._step_metrics.append(record.metric.step_metric)
        elif kind == "exit":
            self.exit_code = int(record.exit.exit_code)
        return []

    def _run(self, run: Any) -> None:
        self.run_id = run.run_id or self.run_id
        self.info = {
            "run_id": self.run_id,
            "project": run.project,
            "entity": run.entity,
            "name": run.display_name or self.run_id,
            "group": run.run_group,
            "job_type": run.job_type,
            "tags": list(run.tags),
            "notes": run.notes,
            "host": run.host,
        }
        _apply(self.config, run.config.update)
        _apply(self.summary, run.summary.update)

    def _history(self, history: Any) -> list[dict[str, Any]]:
        row = _apply({}, history.item)
        step = self._row_step(row, int(history.step.num))
        values, tables = flatten(row)
        events = []
        if self._pending is not None and self._pending[0] != step:
            events.append(self._step_event(*self._pending))
            self._pending = None
        if self._pending is None:
            self._pending = (step, {})
        self._pending[1].update(values)
        self._history_keys.update(values)
        self.last_step = max(self.last_step, step)
        for key, ref in tables.items():
            events += self._table(key, ref, step)
        return events

    def _row_step(self, row: dict[str, Any], logged: int) -> int:
        for name in self._step_metrics:
            step = wandb_tables.as_step(row.get(name))
            if step is not None:
                return step
        return logged

    def _table(self, key: str, ref: dict, step: int) -> list[dict[str, Any]]:
        path = self._table_path(ref)
        if path is None or not path.is_file():
            self._waiting.append((key, ref, step))
            return []
        table = json.loads(path.read_text(encoding="utf-8"))
        # TRL logs its completions table on every log call, and the one at the end of
        # training comes at the last step: the same rows again, in a table file of its
        # own. A table whose rows were read at this step already is that copy (another
        # table at the step, evaluation's, has rows of its own and is kept).
        rows = json.dumps([table.get("columns"), table.get("data")], sort_keys=True)
        read = (key, step, hashlib.sha256(rows.encode()).hexdigest())
        if read in self._tables_read:
            return []
        self._tables_read.add(read)
        weights = self.config.get("reward_weights")
        logged = completions.logged_rewards(self._history_keys)
        found = wandb_tables.samples(table, step=step, weights=weights, logged=logged)
        if wandb_tables.is_cumulative(table):
            found = [s for s in found if (key, s.step) not in self._tables_sent]
            self._tables_sent.update((key, s.step) for s in found)
        return wandb_tables.trajectories(found, self._groups_at)

    def _table_path(self, ref: dict) -> Path | None:
        """The table's file, only inside the run's ``files/``."""
        files = (self.run_dir / "files").resolve()
        path = (files / str(ref.get("path", ""))).resolve()
        return path if path.is_relative_to(files) and path != files else None

    def _retry_tables(self) -> list[dict[str, Any]]:
        waiting, self._waiting = self._waiting, []
        events = []
        for key, ref, step in waiting:
            events += self._table(key, ref, step)
        return events

    def _summary_only(self) -> dict[str, Any]:
        values, _ = flatten(self.summary)
        return {k: v for k, v in values.items() if k not in self._history_keys}

    def _step_event(self, step: int, data: dict[str, Any]) -> dict[str, Any]:
        data = {**self._system, **data}  # the row's own names win
        self._system = {}
        metrics = metric_names.map_metrics("wandb", data)
        return {"type": "step", "step": step, "metrics": metrics}

    def run_config(self) -> dict[str, Any]:
        """The dashboard run's config: W&B's config (without its ``_wandb``
        bookkeeping), with where it came from and the summary so far under
        ``wandb``."""
        config = {k: v for k, v in self.config.items() if not k.startswith("_wandb")}
        summary, _ = flatten(self.summary)
        config["source"] = "wandb"
        config["wandb"] = {
            **self.info,
            "run_id": self.run_id,
            "dir": str(self.run_dir.resolve()),
            "summary": summary,
        }
        return _json_safe(config)


def _json_safe(value: Any) -> Any:
    """NaN and infinities as the strings our events use (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return (
            "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        )
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
