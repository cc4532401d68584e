"""A ``RUN_TRAINER`` stand-in that plays a run slowly, for browser tests and demos.

Same signature and contract as ``trainer.runner.run_from_config`` (``run_started``,
``should_stop`` polled before each step, ``run_finished``), but it trains nothing:
it emits :mod:`dashboard.pages.seed`'s synthetic events, by default with a
script-injection payload in every piece of text, so tests can watch untrusted text
arrive over the websocket.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dashboard.pages.seed import TextSource, step_events


@dataclass
class ScriptedResult:
    status: str
    error: str | None = None


def scripted_trainer(
    config: Any,
    sink: Any,
    *,
    should_stop: Callable[[], bool] | None = None,
    payloads: bool = True,
    delay_s: float = 0.4,
    **_: Any,
) -> ScriptedResult:
    """Emits a run's events step by step with a pause between steps, like a slow
    trainer: what browser tests watch arrive over the websocket."""
    cfg = (
        config.model_dump(mode="json")
        if hasattr(config, "model_dump")
        else dict(config)
    )
    from dashboard.pages.forms import normalise

    cfg = normalise(cfg)
    rng, src = random.Random(cfg.get("seed", 0)), TextSource(payloads)
    sink.emit(
        {
            "type": "run_started",
            "config": cfg,
            "start_step": 1,
            "num_params": 0,
            "device": "cpu",
        }
    )
    for step in range(1, cfg["steps"] + 1):
        if should_stop and should_stop():
            sink.emit(
                {
                    "type": "run_finished",
                    "status": "cancelled",
                    "step": step - 1,
                    "error": None,
                }
            )
            return ScriptedResult("cancelled")
        for ev in step_events(
            step, cfg, rng, src, groups=2, group_size=2, alert_every=3
        ):
            sink.emit(ev)
        time.sleep(delay_s)
    sink.emit(
        {
            "type": "run_finished",
            "status": "succeeded",
            "step": cfg["steps"],
            "error": None,
        }
    )
    return ScriptedResult("succeeded")
