"""TRL's files -> our events: ``--from trl OUTPUT_DIR`` (checked against TRL 1.16).

Completions: with ``log_completions=True``, ``GRPOTrainer.log``
(``trl/trainer/grpo_trainer.py``) writes, at every logging step,
``<output_dir>/completions/completions_<global_step:05d>.parquet`` from a pandas
frame with columns ``step``, ``prompt``, ``completion`` (text, or chat messages),
one column per reward function (its name), any extra logged columns, then
``advantage``: the latest ``generation_batch_size`` rows, consecutive groups of
``num_generations`` siblings.

Metrics: with ``report_to="tensorboard"``, transformers' ``TensorBoardCallback``
writes event files under ``<output_dir>/runs/<date>_<host>/`` (``logging_dir``): every
logged value as a scalar ``train/<name>`` at ``global_step``, and the
``TrainingArguments`` as the text ``args`` (tag ``args/text_summary``); the ``train/`` prefix is dropped, as
``trainer.integrations.trl.DashboardCallback`` drops it (read here for ``num_generations`` and
``reward_weights``, and sent as the run's config).

Which number columns are reward functions (``rewards.components``) and what a row's
reward is: :mod:`trainer.importers.completions`, the rule every reader of TRL's table
shares (the reward names TRL logged to TensorBoard, else ``reward_weights``); the other
columns go to ``facts``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from trainer.importers.completions import (
    column_weights,
    logged_rewards,
    reward_columns,
    row_reward,
)
from trainer.importers.shapes import chat_text, group_by_prompt, text_trajectory
from trainer.importers.tailing import BadImportFile, Settled
from trainer.importers.tensorboard import TensorBoardReader

COMPLETIONS = re.compile(r"completions_(\d+)\.parquet$")
BASE = ("step", "prompt", "completion", "advantage")
# add_text("args", ...) is stored under "args/text_summary"
# (torch/utils/tensorboard/summary.py text()).
ARGS_TAG = "args/text_summary"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover (pyarrow is pinned)
        raise BadImportFile(f"{path}: reading parquet needs pyarrow ({exc})") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # noqa: BLE001 (pyarrow raises many kinds)
        raise BadImportFile(f"{path}: not a readable parquet file: {exc}") from None


def completion_events(
    step: int,
    rows: list[dict[str, Any]],
    args: dict[str, Any],
    logged: set[str] = frozenset(),
) -> list[dict[str, Any]]:
    """One completions file's rows -> trajectory events (``logged``: the reward
    functions' names seen in ``rewards/<name>/mean`` metrics)."""
    if rows and not {"prompt", "completion"} <= rows[0].keys():
        raise BadImportFile(f"step {step}: rows need prompt and completion columns")
    prompts = [chat_text(r.get("prompt")) for r in rows]
    size = args.get("num_generations")
    if isinstance(size, int) and size > 0 and len(rows) % size == 0:
        places = [(i // size, i % size) for i in range(len(rows))]
    else:
        places = group_by_prompt(prompts)
    weights = args.get("reward_weights")
    names = reward_columns(
        list(rows[0]) if rows else [], rows, weights=weights, logged=logged
    )
    weighs = column_weights(names, weights)
    events = []
    for row, record in enumerate(rows):
        parts, total = row_reward(record, names, weights)
        facts = {
            k: v
            for k, v in record.items()
            if k not in BASE and k not in names and isinstance(v, (str, int, float))
        }
        advantage = record.get("advantage")
        events.append(
            text_trajectory(
                step=int(record["step"]) if _number(record.get("step")) else step,
                group=places[row][0],
                index=places[row][1],
                prompt=prompts[row],
                completion=chat_text(record.get("completion")),
                reward=total,
                components=parts,
                advantage=float(advantage) if _number(advantage) else math.nan,
                facts={"source": "trl", **facts},
                weights={k: w for k, w in weighs.items() if k in parts},
            )
        )
    return events


class TrlReader:
    """Reads a TRL ``output_dir``; :meth:`poll` returns events not returned before,
    so calling it repeatedly tails a live run."""

    framework = "trl"

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)
        # Names as TRL logs them (and DashboardCallback sends them): ``train/`` is
        # transformers' prefix for TensorBoard, not part of the name.
        self.tensorboard = TensorBoardReader(self.output_dir, "trl", "train/")
        self.last_step = 0
        self._files = Settled()
        self._rewards: set[str] = set()  # from rewards/<name>/mean

    @property
    def args(self) -> dict[str, Any]:
        """The run's ``TrainingArguments`` (from TensorBoard's ``args`` text), or {}."""
        try:
            texts = self.tensorboard.texts
            value = json.loads(texts.get(ARGS_TAG) or texts.get("args") or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def config(self) -> dict[str, Any]:
        """The run's config: the ``TrainingArguments`` when TensorBoard has them (a
        separate pass over the event files: nothing :meth:`poll` sends is consumed)."""
        probe = TensorBoardReader(self.output_dir, framework="trl")
        probe.poll()
        self.tensorboard.texts.update(probe.texts)
        return {
            "source": "trl",
            "output_dir": str(self.output_dir.resolve()),
            **self.args,
        }

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        events = self.tensorboard.poll(settle=settle)
        for event in events:
            self._rewards |= logged_rewards(event.get("metrics") or {})
        directory = self.output_dir / "completions"
        files = {}
        for path in directory.glob("completions_*.parquet"):
            if match := COMPLETIONS.search(path.name):
                files[int(match.group(1))] = path
        for step, path in sorted(files.items()):
            if not self._files.ready(path, settle=settle):
                continue
            rows = read_parquet(path)
            events += completion_events(step, rows, self.args, self._rewards)
            self._files.take(path)
        for event in events:
            self.last_step = max(self.last_step, event["step"])
        return events

    def flush(self) -> list[dict[str, Any]]:
        return []
