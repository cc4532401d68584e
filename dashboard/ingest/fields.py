"""An event's fields as the write path stores and frames them: the references of an
alert to its evidence (:func:`alert_trajectories`) and what one stored event adds to
the run's next frame (:func:`summarise`). Every value here is untrusted: ints through
:func:`dashboard.jsonsafe.as_int`, text bounded and JSON-safe."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dashboard import jsonsafe
from dashboard.jsonsafe import as_int
from dashboard.live.frames import FrameParts


def alert_trajectories(refs: Any) -> list[dict[str, Any]]:
    """An alert event's ``trajectories`` as stored: ``{"group", "index", "task_id",
    "why"}`` each, untrusted strings bounded, duplicates dropped."""
    out, seen = [], set()
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, dict):
            continue
        key = (as_int(ref.get("group")), as_int(ref.get("index")))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {
                "group": key[0],
                "index": key[1],
                "task_id": jsonsafe.text(ref.get("task_id"), 200),
                "why": jsonsafe.text(ref.get("why"), 200),
            }
        )
    return out


def summarise(ev: dict[str, Any], parts: FrameParts) -> None:
    """Fold what one stored event adds into the frame being built."""
    kind, step = ev.get("type"), as_int(ev.get("step"))
    if kind == "step" and isinstance(ev.get("metrics"), dict):
        parts.steps[step] = {
            jsonsafe.text(k, 200): jsonsafe.num(jsonsafe.to_float(v))
            for k, v in ev["metrics"].items()
        }
    elif kind == "trajectory":
        parts.trajectories.append(
            {
                "step": step,
                "group": as_int(ev.get("group")),
                "index": as_int(ev.get("index")),
                "task_id": jsonsafe.text(ev.get("task_id"), 200),
                "reward": jsonsafe.num(jsonsafe.to_float(ev.get("reward"))),
                "advantage": jsonsafe.num(jsonsafe.to_float(ev.get("advantage"))),
                "dropped": bool(ev.get("dropped")),
                "num_turns": as_int(ev.get("num_turns")),
                "length": as_int(ev.get("length")),
            }
        )
    elif kind == "judgement":
        score = ev.get("score")
        parts.judgements.append(
            {
                "step": step,
                "group": as_int(ev.get("group")),
                "index": as_int(ev.get("index")),
                "judge": jsonsafe.text(ev.get("judge"), 64),
                "ok": bool(ev.get("ok", True)),
                "score": None
                if score is None
                else jsonsafe.num(jsonsafe.to_float(score)),
            }
        )
    elif kind == "alert":
        parts.alerts.append(
            {
                "step": step,
                "detector": jsonsafe.text(ev.get("detector"), 64),
                "severity": jsonsafe.text(ev.get("severity"), 16),
                "message": jsonsafe.text(ev.get("message"), 2000),
                "trajectories": alert_trajectories(ev.get("trajectories"))[:64],
                # how many rollouts showed it in all (the page says so beside those
                # named, as the server's render does)
                "evidence": {"trajectories_matched": _matched(ev.get("evidence"))},
            }
        )
    elif kind == "checkpoint":
        parts.checkpoints.append({"step": step})
    elif kind == "warmstart":
        parts.warmup = warmup_of(ev)


def _matched(evidence: Any) -> int | None:
    n = evidence.get("trajectories_matched") if isinstance(evidence, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def warmup_of(ev: dict[str, Any]) -> dict[str, Any]:
    """A ``warmstart`` event as ``Run.warmup`` keeps it: ``{"done", "of", "loss"}``."""
    return {
        "done": as_int(ev.get("done")),
        "of": as_int(ev.get("of")),
        "loss": jsonsafe.num(jsonsafe.to_float(ev.get("loss"))),
    }


def start_step_of(event: dict[str, Any]) -> int:
    """The first step a (re)started attempt will emit: rows from it on are replaced."""
    return max(as_int(event.get("start_step"), 1), 1)


def last_step_after(events: Iterable[dict[str, Any]], last_step: int) -> int:
    """The run's last step once ``events`` are stored: the largest step seen, in
    whatever order the steps arrive (a restart rewinds it to before its start)."""
    for ev in events:
        if ev.get("type") == "run_started":
            last_step = start_step_of(ev) - 1
        elif ev.get("type") == "step":
            last_step = max(last_step, as_int(ev.get("step"), last_step))
    return last_step
