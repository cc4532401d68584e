"""trackio's logged values -> our events (checked against ``trackio==0.43.0``).

What a trackio client logs (``trackio.Run.log``, after ``utils.serialize_values``):
numbers (non-finite ones as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``) and objects with
a ``_type``: ``trackio.table`` (``{"_value": [row, ...]}``, a row a column -> value dict),
``trackio.trace`` (``{"messages", "metadata", "spans"}``, OpenAI-style messages; a list
of them under one key), and histograms, markdown and media, which have no place here.

Who logs through trackio, and how their names map (docs/trackio.md):

* TRL (``report_to="trackio"``): transformers' ``TrackioCallback`` logs TRL's values with
  a ``train/`` prefix plus ``train/global_step``, without a step; the prefix is dropped
  and the global step is the step, as :mod:`trainer.integrations.trl` does, so the two
  ways of reporting a TRL run give the same names and steps. ``GRPOTrainer`` with
  ``log_completions=True`` logs a ``completions`` table: ``step``, ``prompt``,
  ``completion``, a column per reward function, extra columns, ``advantage``.
* verl (``trainer.logger=['trackio']``): its names, plus ours
  (:func:`trainer.importers.verl.map_metrics`), at verl's global step.
* anyone else: the numbers under their own names, at trackio's step.

Pure: no Django; the dashboard's ``runs.trackio`` finds the run and stores the events.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainer.importers.completions import column_weights, reward_columns, row_reward
from trainer.importers.shapes import (
    chat_text,
    group_by_prompt,
    grpo_advantages,
    task_id_for,
    text_segment,
    text_trajectory,
)
from trainer.importers.verl import map_metrics

TABLE, TRACE = "trackio.table", "trackio.trace"
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
MAX_FACT_TEXT = 2000
# Keys trackio adds to a run's config (``Run.__init__``): not the trainer's.
INTERNAL_CONFIG_KEYS = ("_Username", "_Created", "_Group")


class BadEntry(ValueError):
    """A logged value of a shape trackio's client never sends: ``path`` says where in
    the entry (``metrics.completions._value[3].step``), ``problem`` what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem

    def within(self, prefix: str) -> BadEntry:
        """The same error, its path under ``prefix``."""
        sep = "" if self.path.startswith("[") else "."
        return BadEntry(f"{prefix}{sep}{self.path}", self.problem)


def detect_framework(config: Mapping[str, Any] | None) -> str:
    """What produced a run, from its config: a ``framework`` string it states, else
    ``trl`` for a TRL config (``GRPOConfig``: ``num_generations`` and ``report_to``),
    ``verl`` for a verl one (``actor_rollout_ref`` and ``algorithm``), else ``trackio``."""
    config = config or {}
    stated = config.get("framework")
    if isinstance(stated, str) and 1 <= len(stated.strip()) <= 64:
        return stated.strip()
    if "num_generations" in config and "report_to" in config:
        return "trl"
    if "actor_rollout_ref" in config and "algorithm" in config:
        return "verl"
    return "trackio"


def trainer_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's config without the keys trackio itself adds."""
    return {k: v for k, v in (config or {}).items() if k not in INTERNAL_CONFIG_KEYS}


def number(value: Any) -> float | None:
    """A logged number as a float (the non-finite strings too); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # JSON's integers have no bound; floats do
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        return NON_FINITE.get(value)
    return None


def is_table(value: Any) -> bool:
    return isinstance(value, dict) and value.get("_type") == TABLE


def traces_in(value: Any) -> list[dict[str, Any]]:
    """The traces a logged value holds: one, a list of them, or none."""
    if isinstance(value, dict) and value.get("_type") == TRACE:
        return [value]
    if isinstance(value, list) and all(
        isinstance(v, dict) and v.get("_type") == TRACE for v in value
    ):
        return list(value)
    return []


def step_of(metrics: Mapping[str, Any], step: Any, framework: str) -> int:
    """The training step of a logged entry: TRL's ``train/global_step`` when it is
    there, else the step trackio sent (its counter, or verl's global step)."""
    if framework == "trl":
        global_step = metrics.get("train/global_step")
        if isinstance(global_step, int) and not isinstance(global_step, bool):
            if _whole(global_step) is None:
                raise BadEntry(
                    "metrics.train/global_step",
                    f"must be a whole number from 0 to {WHOLE_LIMIT - 1}",
                )
            return global_step
    return step


def step_metrics(metrics: Mapping[str, Any], framework: str) -> dict[str, float]:
    """The entry's numbers under our names (tables, traces, media left out)."""
    values = {}
    for key, value in metrics.items():
        x = value if type(value) is float else number(value)
        if x is not None:
            values[key] = x
    if framework == "trl":
        values.pop("train/global_step", None)
        return {key.removeprefix("train/"): v for key, v in values.items()}
    if framework == "verl":
        return map_metrics(values)
    return values


# --- TRL's completions table ---------------------------------------------------------
BASE_COLUMNS = ("step", "prompt", "completion", "advantage")


def is_completions(rows: Any) -> bool:
    return (
        isinstance(rows, list)
        and bool(rows)
        and all(
            isinstance(r, dict) and "prompt" in r and "completion" in r for r in rows
        )
    )


def table_events(
    step: int,
    rows: list[dict[str, Any]],
    *,
    weights: Sequence[float] | None = None,
    logged: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """A completions table -> trajectory events: the reward functions' columns and the
    reward as every reader of TRL's table decides them (:mod:`trainer.importers.
    completions`: ``logged``, the reward names of the run's ``rewards/<name>/mean``
    metrics, else ``weights``, the config's ``reward_weights``); ``advantage`` TRL's
    (else GRPO's within the group); siblings are rows with an identical prompt
    (:func:`place` numbers the groups). A ``step`` column all rows agree on (TRL's
    global step) is the step; a ``step`` that is not a whole number is refused
    (:class:`BadEntry`). Other columns (``log_extra``'s) are facts."""
    for i, r in enumerate(rows):
        if r.get("step") is not None and _whole(r["step"]) is None:
            raise BadEntry(
                f"_value[{i}].step",
                f"must be a whole number from 0 to {WHOLE_LIMIT - 1}",
            )
    steps = {r.get("step") for r in rows}
    if len(steps) == 1 and None not in steps:
        (step,) = steps
    prompts = [chat_text(r.get("prompt", "")) for r in rows]
    places = group_by_prompt(prompts)
    names = reward_columns(
        list(rows[0]), rows, weights=weights, logged=logged, number=number
    )
    scored = [row_reward(r, names, weights, number) for r in rows]
    weighs = column_weights(names, weights, number)
    computed = grpo_advantages([total for _, total in scored], [g for g, _ in places])
    events = []
    for row in range(len(rows)):
        given = number(rows[row].get("advantage"))
        facts: dict[str, Any] = {"source": "trackio"}
        for key, value in rows[row].items():
            if key in BASE_COLUMNS or key in names:
                continue
            if isinstance(value, str):
                facts[key] = value[:MAX_FACT_TEXT]
            elif number(value) is not None:
                facts[key] = value
        components, total = scored[row]
        events.append(
            text_trajectory(
                step=step,
                group=0,
                index=0,
                prompt=prompts[row],
                completion=chat_text(rows[row].get("completion", "")),
                reward=total,
                components=components,
                advantage=computed[row] if given is None else given,
                facts=facts,
                weights={k: w for k, w in weighs.items() if k in components},
            )
        )
        events[-1].update(group=None, index=None)  # placed by place()
    return events


# --- traces --------------------------------------------------------------------------
def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part)
            for part in content
        )
    return str(content)


def _tool_calls(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, ``<tool_call>{json}</tool_call>``) of each OpenAI-style tool call."""
    calls = message.get("tool_calls")
    out = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        fn = call.get("function") if isinstance(call.get("function"), dict) else call
        name = str(fn.get("name", ""))
        args = fn.get("arguments", {})
        if isinstance(args, str):
            # Not JSON (or nested past the parser's depth): kept as the string.
            with contextlib.suppress(ValueError, RecursionError):
                args = json.loads(args)
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        out.append((name, f"<tool_call>{body}</tool_call>"))
    return out


def trace_turns(messages: list[Any]) -> tuple[list[dict], list[dict], str]:
    """(segments, agent steps, prompt text) of a trace's messages: those before the
    first assistant message are the prompt; each assistant message opens a turn (its
    text and tool calls the action), the messages after it are that turn's output."""
    messages = [m for m in messages if isinstance(m, dict)]
    first = next(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant"),
        len(messages),
    )
    segments, prompt_lines = [], []
    for m in messages[:first]:
        role = str(m.get("role", "user"))
        prompt_lines.append(f"{role}: {_content(m)}")
        segments.append({**text_segment("prompt", _content(m)), "role": role})
    steps: list[dict[str, Any]] = []
    for m in messages[first:]:
        role = str(m.get("role", ""))
        text = _content(m)
        if role == "assistant":
            calls = _tool_calls(m)
            action = "\n".join([text, *(c for _, c in calls)]).strip("\n")
            turn = len(steps)
            seg = {**text_segment("action", action), "turn": turn, "role": "assistant"}
            segments.append(seg)
            steps.append(
                {
                    "index": turn,
                    "tool": calls[0][0] if calls else "",
                    "ok": True,
                    "action": action,
                    "observation": "",
                    "facts": {},
                }
            )
            continue
        seg = {**text_segment("tool", text), "turn": len(steps) - 1, "role": role}
        seg["mask"] = "tool"
        segments.append(seg)
        steps[-1]["observation"] = "\n".join(
            filter(None, [steps[-1]["observation"], text])
        )
    return segments, steps, "\n".join(prompt_lines)


# Steps, groups and indices are 32-bit in the event schema (trainer.event_schema)
# and in the database: a larger one is refused here, before anything is looked up.
WHOLE_LIMIT = 2**31


def _whole(value: Any) -> int | None:
    whole = isinstance(value, int) and not isinstance(value, bool)
    return value if whole and 0 <= value < WHOLE_LIMIT else None


def trace_event(step: int, trace: Mapping[str, Any]) -> dict[str, Any]:
    """A trace -> a trajectory event, with the turns and tool calls of its messages
    (a list; anything else is refused, :class:`BadEntry`); ``metadata`` gives
    ``reward``, ``rewards`` (components), ``advantage``, ``group`` and ``index`` (whole
    numbers), ``model_version`` and any other plain value (facts) where present.
    ``group``/``index`` not given are None: :func:`place` chooses them (siblings: the
    same prompt at the same step)."""
    messages = trace.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise BadEntry("messages", "must be a list of messages")
    segments, steps, prompt = trace_turns(messages or [])
    meta = trace.get("metadata") if isinstance(trace.get("metadata"), dict) else {}
    reward = number(meta.get("reward"))
    parts = meta.get("rewards") if isinstance(meta.get("rewards"), dict) else {}
    components = {str(k): number(v) for k, v in parts.items() if number(v) is not None}
    facts: dict[str, Any] = {"source": "trackio"}
    for key, value in meta.items():
        if key in ("reward", "rewards", "advantage", "index"):
            continue
        if key == "group" and _whole(value) is not None:
            continue
        if isinstance(value, str):
            facts[key] = value[:MAX_FACT_TEXT]
        elif isinstance(value, (int, float, bool)) or value is None:
            facts[key] = value
    return {
        "type": "trajectory",
        "step": int(step),
        "group": _whole(meta.get("group")),
        "index": _whole(meta.get("index")),
        "task_id": task_id_for(prompt),
        "dropped": False,
        "reward": reward,
        "advantage": number(meta.get("advantage")),
        "rewards": {"total": reward, "components": components, "per_step": {}},
        "num_turns": len(steps),
        "length": 0,
        "truncated": False,
        "facts": facts,
        "steps": steps,
        "segments": segments,
    }


def trace_events(step: int, traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A list of traces -> their trajectory events (:func:`trace_event`); a bad one
    is refused by its position (``[2].messages``)."""
    events = []
    for i, trace in enumerate(traces):
        try:
            events.append(trace_event(step, trace))
        except BadEntry as exc:
            raise exc.within(f"[{i}]") from None
    return events


class Slots:
    """The (group, index, task id) taken at one step, indexed for :func:`place`: a
    task's first group, each group's next free index, the next new group (a
    table of n rows is placed in O(n), not by rescanning the rows placed)."""

    def __init__(self, rows: Iterable[tuple[int, int, str]] = ()) -> None:
        self.group_of: dict[str, int] = {}
        self.next_index: dict[int, int] = {}
        self.next_group = 0
        for row in rows:
            self.add(*row)

    def add(self, group: int, index: int, task: str) -> None:
        self.group_of.setdefault(task, group)
        self.next_index[group] = max(self.next_index.get(group, 0), index + 1)
        self.next_group = max(self.next_group, group + 1)


def place(
    events: list[dict[str, Any]], taken: dict[int, Slots]
) -> list[dict[str, Any]]:
    """Give the trajectories without a ``group`` or ``index`` theirs, beside the
    slots already ``taken`` at their step (updated): the group of a sibling with
    the same prompt (task id), else a new group; the next free index."""
    for ev in events:
        if ev.get("type") != "trajectory":
            continue
        slots = taken.setdefault(ev["step"], Slots())
        if ev["group"] is None:
            ev["group"] = slots.group_of.get(ev["task_id"], slots.next_group)
        if ev["index"] is None:
            ev["index"] = slots.next_index.get(ev["group"], 0)
        slots.add(ev["group"], ev["index"], ev["task_id"])
    return events


def entry_events(
    metrics: Mapping[str, Any],
    step: int,
    framework: str,
    *,
    weights: Sequence[float] | None = None,
    logged: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """One ``bulk_log`` entry -> its ``step`` event (if it has numbers) and the
    trajectories of its completions tables (``weights``, ``logged``: see
    :func:`table_events`) and traces, at the entry's step (those of traces still to
    :func:`place`). A value of a shape the client never sends is refused by its path
    in the entry (:class:`BadEntry`: ``metrics.rollout.messages: ...``)."""
    step = step_of(metrics, step, framework)
    events: list[dict[str, Any]] = []
    values = step_metrics(metrics, framework)
    if values:
        events.append({"type": "step", "step": step, "metrics": values})
    for key, value in metrics.items():
        try:
            if is_table(value) and is_completions(value.get("_value")):
                rows = value["_value"]
                events.extend(table_events(step, rows, weights=weights, logged=logged))
            elif isinstance(value, dict) and traces_in(value):  # one trace
                events.append(trace_event(step, value))
            elif isinstance(value, list):
                events.extend(trace_events(step, traces_in(value)))
        except BadEntry as exc:
            raise exc.within(f"metrics.{key}") from None
    return events


def alert_event(entry: Mapping[str, Any], step: int) -> dict[str, Any]:
    """A ``bulk_alert`` entry -> an ``alert`` event (``trackio:<title>``)."""
    title = str(entry.get("title") or "alert")
    level = str(entry.get("level") or "warn").lower()
    severity = {"warn": "warning", "warning": "warning", "error": "error"}.get(
        level, "info"
    )
    text = entry.get("text")
    return {
        "type": "alert",
        "step": step,
        "detector": f"trackio:{title}"[:64],
        "severity": severity,
        "message": str(text if text is not None else title)[:10_000],
        "evidence": {"source": "trackio", "title": title[:200]},
    }
