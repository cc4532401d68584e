"""A stand-in for ``trainer.runner.run_from_config`` with the same signature and events.

Deterministic in (seed, step), fast, and faithful to the runner contract the platform
relies on: ``run_started`` with ``start_step``, resume from the newest
``step-NNNNNN`` directory in ``checkpoint_dir`` (written atomically, before its
``checkpoint`` event), ``should_stop`` polled before each step, ``run_finished``
then re-raise on failure. Tests tune it with environment variables (it runs inside
Celery workers too): ``FAKE_RUNNER_STEP_S`` (seconds per step),
``FAKE_RUNNER_FAIL_AT`` (raise at that step) and ``FAKE_RUNNER_DEAF`` (never asks
``should_stop``: a stage stuck where no stop check reaches).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CKPT = re.compile(r"^step-(\d{6,})$")


@dataclass
class FakeResult:
    status: str
    last_step: int
    error: str | None = None


def metrics_for(seed: int, step: int) -> dict[str, float]:
    return {
        "reward": round(math.sin(seed + step), 6),
        "reward_std": round(abs(math.cos(seed * 3 + step)), 6),
        "policy_loss": round(1.0 / (step + seed + 1), 6),
        "kl": math.nan if step % 4 == 2 else step * 0.01,
        "grad_norm": math.inf if step % 5 == 4 else float(step),
    }


def _segments(step: int, index: int) -> list[dict[str, Any]]:
    n = 3 + index
    return [
        {
            "turn": 0,
            "kind": "prompt",
            "text": "what is 2 + 2",
            "token_ids": [1, 2, 3],
            "tokens": ["what", "is", "2"],
            # The trainer's "no value" (None) and a computed NaN both store as NaN.
            "logprob": [None] + [math.nan] * 2,
            "old_logprob": [None] + [math.nan] * 2,
            "ratio": [1.0] * 3,
            "entropy": [0.0] * 3,
            "advantage": [0.0] * 3,
            "mask": "prompt",
        },
        {
            "turn": 0,
            "kind": "action",
            "text": "<b>answer</b> 4\x00",
            "token_ids": list(range(10, 10 + n)),
            "tokens": [f"t{i}" for i in range(n)],
            "logprob": [-0.5 * (i + 1) for i in range(n)],
            "old_logprob": [-0.5 * (i + 1) for i in range(n)],
            "ratio": [1.0] * n,
            "entropy": [0.25] * n,
            "advantage": [0.1 * step] * n,
            "mask": None,
        },
    ]


def events_for_step(seed: int, step: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "step", "step": step, "metrics": metrics_for(seed, step)}
    ]
    for index in range(2):
        out.append(
            {
                "type": "trajectory",
                "step": step,
                "group": 0,
                "index": index,
                "task_id": f"task-{step}",
                "dropped": False,
                "reward": float(index),
                "advantage": index - 0.5,
                "rewards": {
                    "total": float(index),
                    "components": {"outcome": float(index)},
                    "per_step": {"outcome": [float(index)]},
                },
                "num_turns": 1,
                "length": 6 + index,
                "truncated": False,
                "facts": {"success": bool(index)},
                "steps": [
                    {
                        "index": 0,
                        "action": "answer 4",
                        "tool": "answer",
                        "ok": True,
                        "observation": "ok",
                    }
                ],
                "segments": _segments(step, index),
            }
        )
        out.append(
            {
                "type": "judgement",
                "step": step,
                "group": 0,
                "index": index,
                "judge": "rules",
                "backend": "rubric",
                "ok": True,
                "score": 0.5,
                "scores": {"correct": 0.5},
                "rationale": "<script>alert(1)</script>",
                "raw": None,
                "error": None,
                "target_step": 0,
            }
        )
    out.append(
        {
            "type": "critical_path",
            "step": step,
            "group": 0,
            "index": 0,
            "stages": [[1, [2, 3]]],
            "critical_steps": 4,
            "total_steps": 6,
            "path": [0, 1],
        }
    )
    if step % 3 == 0:
        out.append(
            {
                "type": "alert",
                "step": step,
                "detector": "length_growth",
                "severity": "warning",
                "message": "completions are getting longer",
                "evidence": {"slope": math.inf},
            }
        )
    return out


def _latest(root: Path) -> int:
    if not root.is_dir():
        return 0
    steps = [
        int(m.group(1))
        for p in root.iterdir()
        if p.is_dir() and (m := _CKPT.match(p.name))
    ]
    return max(steps, default=0)


def _save(root: Path, step: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    (tmp / "meta.json").write_text(json.dumps({"step": step}))
    if final.exists():
        for f in final.iterdir():
            f.unlink()
        final.rmdir()
    os.replace(tmp, final)
    return final


def run_from_config(
    config, sink, *, should_stop=None, checkpoint_dir=None, resume=True, endpoints=None
):
    step_s = float(os.environ.get("FAKE_RUNNER_STEP_S", "0.01"))
    fail_at = int(os.environ.get("FAKE_RUNNER_FAIL_AT", "0"))
    if os.environ.get("FAKE_RUNNER_DEAF"):
        should_stop = None
    root = Path(checkpoint_dir) if checkpoint_dir else None
    start = _latest(root) if (root is not None and resume) else 0
    sink.emit(
        {
            "type": "run_started",
            "config": config.model_dump(mode="json"),
            "start_step": start + 1,
            "num_params": 1,
            "device": "cpu",
        }
    )
    step = start
    try:
        for step in range(start + 1, config.steps + 1):
            if should_stop is not None and should_stop():
                sink.emit(
                    {
                        "type": "run_finished",
                        "status": "cancelled",
                        "step": step - 1,
                        "error": None,
                    }
                )
                return FakeResult("cancelled", step - 1)
            time.sleep(step_s)
            if step == fail_at:
                raise RuntimeError(f"boom at step {step}")
            for event in events_for_step(config.seed, step):
                sink.emit(event)
            every = config.checkpoint.every
            due = step == config.steps or (every > 0 and step % every == 0)
            if root is not None and due:
                sink.emit(
                    {"type": "checkpoint", "step": step, "path": str(_save(root, step))}
                )
    except Exception as exc:
        sink.emit(
            {
                "type": "run_finished",
                "status": "failed",
                "step": step,
                "error": str(exc),
            }
        )
        raise
    sink.emit(
        {
            "type": "run_finished",
            "status": "succeeded",
            "step": config.steps,
            "error": None,
        }
    )
    return FakeResult("succeeded", config.steps)
