"""TRL -> dashboard: ``GRPOTrainer(..., callbacks=[DashboardCallback(url)])``.

What it sends (through :class:`trainer.httpsink.HttpSink`, so a dashboard that is down
only fills the spool in ``<output_dir>/dashboard-spool``; every hook swallows its own
errors and training never waits on the network):

* ``run_started`` with the ``GRPOConfig`` (``framework="trl"``);
* one ``step`` event per optimiser step: every value TRL logged for it (its names,
  a ``train/`` prefix dropped; ``reward``, ``reward_std``, ``rewards/<fn>/mean``, ``kl``,
  ``entropy``, ``clip_ratio/...`` already are ours), the logs of one step merged;
* each step's completions as ``trajectory`` events: prompt and completion text, one
  reward component per reward function (its raw score), the total (weighted by
  ``reward_weights``, the weights beside the components as ``rewards["weights"]``),
  TRL's advantage, and groups of ``num_generations`` consecutive rows;
* ``run_finished`` at the end of training.

Where the completions come from (TRL 1.16, ``trl/trainer/grpo_trainer.py``): after
scoring, ``GRPOTrainer._generate_and_score_completions`` appends to ``trainer._logs``:
``"prompt"``, ``"completion"``, ``"rewards"`` (reward function name -> values) and
``"advantages"``, deques of the latest ``generation_batch_size`` rows, filled whether
or not ``log_completions`` is on. A callback is not handed the trainer, so it is found
on the call stack at ``on_train_begin`` (or given with :meth:`attach`).

Imports without TRL: ``transformers.TrainerCallback`` is the only base.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from typing import Any

from transformers import TrainerCallback

from trainer.httpsink import HttpSink
from trainer.importers.shapes import chat_text, text_trajectory

log = logging.getLogger("trainer.integrations.trl")


class DashboardCallback(TrainerCallback):
    def __init__(
        self,
        url: str,
        token: str | None = None,
        name: str | None = None,
        *,
        spool_dir: str | None = None,
        close_timeout_s: float = 30.0,
    ) -> None:
        from trainer.reporting import token_from_env

        self.url = url
        self.token = token or token_from_env()
        self.name = name
        self.spool_dir = spool_dir
        self.close_timeout_s = close_timeout_s
        self.sink: HttpSink | None = None
        self._trainer: Any = None
        self._pending: tuple[int, dict[str, float]] | None = None
        self._last_batch: tuple | None = None
        self._failed = False

    def attach(self, trainer: Any) -> DashboardCallback:
        """Names the trainer explicitly (instead of finding it on the stack)."""
        self._trainer = trainer
        return self

    # -- hooks: each one guarded, training never breaks because of the dashboard ----

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._guard(self._begin, args, state, model)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._guard(self._log, state, logs or {}, kwargs.get("processing_class"))

    def on_train_end(self, args, state, control, **kwargs):
        self._guard(self._end, state)

    def _guard(self, fn, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 (a report must never stop training)
            if not self._failed:
                log.warning("DashboardCallback: %s: %s (training goes on)", fn, exc)
            self._failed = True

    # -- what the hooks do -----------------------------------------------------------

    def _begin(self, args: Any, state: Any, model: Any) -> None:
        if not state.is_world_process_zero:
            return
        if self._trainer is None:
            self._trainer = _find_trainer()
        config = json.loads(args.to_json_string())
        name = self.name or getattr(args, "run_name", None)
        name = name or os.path.basename(os.path.normpath(args.output_dir))
        self.sink = HttpSink(
            self.url,
            self.token,
            name=name,
            framework="trl",
            config=config,
            spool_dir=self.spool_dir
            or os.path.join(args.output_dir, "dashboard-spool"),
        )
        params = sum(p.numel() for p in model.parameters()) if model is not None else 0
        self.sink.emit(
            {
                "type": "run_started",
                "config": config,
                "start_step": int(state.global_step),
                "num_params": int(params),
                "device": str(getattr(args, "device", "unknown")),
            }
        )

    def _log(self, state: Any, logs: dict[str, Any], tokenizer: Any) -> None:
        if self.sink is None:
            return
        step = int(state.global_step)
        metrics = {
            key.removeprefix("train/"): float(value)
            for key, value in logs.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }
        if self._pending is not None and self._pending[0] != step:
            self._emit_step()
        if self._pending is None:
            self._pending = (step, {})
        self._pending[1].update(metrics)
        for event in self._completions(step, tokenizer):
            self.sink.emit(event)

    def _end(self, state: Any) -> None:
        if self.sink is None:
            return
        self._emit_step()
        self.sink.emit(
            {
                "type": "run_finished",
                "status": "succeeded",
                "step": int(state.global_step),
                "error": None,
            }
        )
        self.sink.close(timeout=self.close_timeout_s)

    def _emit_step(self) -> None:
        if self._pending is not None and self.sink is not None:
            step, metrics = self._pending
            self.sink.emit({"type": "step", "step": step, "metrics": metrics})
        self._pending = None

    def _completions(self, step: int, tokenizer: Any) -> list[dict[str, Any]]:
        logs = getattr(self._trainer, "_logs", None)
        if not logs or not logs.get("prompt"):
            return []
        prompts = [chat_text(p) for p in logs["prompt"]]
        completions = [chat_text(c) for c in logs["completion"]]
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        advantages = list(logs["advantages"])
        batch = (tuple(completions), tuple(advantages))
        if batch == self._last_batch:  # no generation since the last log
            return []
        self._last_batch = batch
        weights = _weights(self._trainer, len(rewards))
        # The components stay the reward functions' scores; what each weighs goes
        # beside them, so a page shows score x weight adding up to the total.
        weighs = dict(zip(rewards, weights, strict=True))
        weighs = weighs if any(w != 1.0 for w in weights) else {}
        size = int(getattr(self._trainer, "num_generations", 0) or 1)
        events = []
        for row, (prompt, completion) in enumerate(
            zip(prompts, completions, strict=False)
        ):
            parts = {name: float(v[row]) for name, v in rewards.items() if row < len(v)}
            total = sum(
                w * v
                for w, v in zip(weights, parts.values(), strict=False)
                if not math.isnan(v)
            )
            events.append(
                text_trajectory(
                    step=step,
                    group=row // size,
                    index=row % size,
                    prompt=prompt,
                    completion=completion,
                    reward=total,
                    components=parts,
                    advantage=float(advantages[row]) if row < len(advantages) else 0.0,
                    length=_length(tokenizer, completion),
                    facts={"source": "trl"},
                    weights={k: w for k, w in weighs.items() if k in parts},
                )
            )
        return events


def _find_trainer() -> Any:
    """The ``Trainer`` whose ``train()`` called this hook: the first frame up the
    stack whose ``self`` has TRL's completion logs."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "_logs") and hasattr(owner, "args"):
            return owner
        frame = frame.f_back
    log.warning("DashboardCallback: trainer not found; completions are not sent")
    return None


def _weights(trainer: Any, n: int) -> list[float]:
    weights = getattr(trainer, "reward_weights", None)
    try:
        values = [float(w) for w in weights.tolist()]
    except AttributeError:
        return [1.0] * n
    return values if len(values) == n else [1.0] * n


def _length(tokenizer: Any, text: str) -> int:
    """The completion's token count, 0 when no tokenizer can tell."""
    try:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
    except Exception:  # noqa: BLE001 (a processor without text, or none)
        return 0
