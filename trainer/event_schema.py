"""The typed schema of the trainer's events: one format for ``events.jsonl`` files, the
worker's sink and the dashboard's HTTP ingest (``POST /api/runs/{id}/events``).

:mod:`trainer.events` documents each event in prose; this module states the same
shapes as pydantic models, so a line can be checked with its bad field named
(:func:`check_event`) and the JSON Schema served (:func:`events_json_schema`). It
checks shapes and bounds only: values the trainer may legitimately write (NaN or
infinite metrics, ``null`` where a per-token value does not exist) are valid. Unknown
keys are ignored, so a newer trainer can add fields without breaking an older server.

Bounds are generous for real runs (a step may carry 4,096 metrics, a segment 262,144
tokens) and refuse what could only exhaust a server.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)

MAX_METRICS = 4096
MAX_TOKENS = 262_144
MAX_SEGMENTS = 1024
MAX_TEXT = 4_000_000
MAX_ITEMS = 100_000
MAX_ALERT_TRAJECTORIES = 1024
# A critical path's timeline (PARL): stages, sub-agents a stage, and in all.
MAX_STAGES = 1024
MAX_SUBAGENTS = 1024
MAX_PATH_SUBAGENTS = 4096
# A segment's extra per-token arrays (``series``): how many, and what a name may be.
MAX_SERIES = 16
SERIES_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_./-]{0,63}$")

Step = Annotated[StrictInt, Field(ge=0, lt=2**31)]
Index = Annotated[StrictInt, Field(ge=0, lt=2**31)]
# JSON has no NaN/inf: they are written as these strings (``JsonlSink``).
NonFinite = Literal["NaN", "Infinity", "-Infinity"]
_FLOAT_MAX = int(sys.float_info.max)


def _fits_a_float(value: int) -> int:
    if not -_FLOAT_MAX <= value <= _FLOAT_MAX:
        raise ValueError("an integer past the range of a float (about 1.8e308)")
    return value


# Every number is read as a float: an integer a float cannot hold is refused.
Num = StrictFloat | Annotated[StrictInt, AfterValidator(_fits_a_float)] | NonFinite
OptNum = Num | None
Key = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Short = Annotated[str, Field(max_length=200)]
Floats = Annotated[list[OptNum], Field(max_length=MAX_TOKENS)]


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class RunStarted(_Event):
    type: Literal["run_started"]
    config: dict[str, Any] = Field(default_factory=dict)
    start_step: Annotated[StrictInt, Field(ge=0, lt=2**31)] = 1
    num_params: Annotated[StrictInt, Field(ge=0)] | None = None
    device: Short | None = None


class StepEvent(_Event):
    type: Literal["step"]
    step: Step
    metrics: Annotated[dict[Key, OptNum], Field(max_length=MAX_METRICS)]


class Segment(_Event):
    turn: Annotated[StrictInt, Field(ge=0, lt=2**31)] | None = 0
    # Which branch of a branched conversation the segment belongs to (its tree in
    # the trajectory's facts["branches"]); absent for one conversation.
    branch: Annotated[StrictInt, Field(ge=0, lt=2**31)] | None = None
    kind: Annotated[str, Field(min_length=1, max_length=32)]
    text: Text = ""
    token_ids: Annotated[
        list[Annotated[StrictInt, Field(ge=0, lt=2**31)]], Field(max_length=MAX_TOKENS)
    ] = []
    tokens: Annotated[list[str], Field(max_length=MAX_TOKENS)] = []
    # Each token as the text it adds to the decoded segment (no tokenizer internals).
    token_text: Annotated[list[str], Field(max_length=MAX_TOKENS)] = []
    # Positions (in the segment) of special tokens, and [position, role] where a chat
    # message opens.
    special: Annotated[
        list[Annotated[StrictInt, Field(ge=0, lt=2**31)]], Field(max_length=MAX_TOKENS)
    ] = []
    turns: Annotated[
        list[tuple[Annotated[StrictInt, Field(ge=0, lt=2**31)], Short]],
        Field(max_length=MAX_TOKENS),
    ] = []
    logprob: Floats = []
    old_logprob: Floats = []
    ratio: Floats = []
    entropy: Floats = []
    advantage: Floats = []
    # Per-token arrays another trainer keeps beyond ours, under its names (prime-rl's
    # mismatch_kl, miles's ref_log_probs...), each aligned to the tokens.
    series: Annotated[
        dict[Annotated[str, Field(pattern=SERIES_NAME.pattern)], Floats],
        Field(max_length=MAX_SERIES),
    ] = {}
    mask: Annotated[str, Field(max_length=64)] | None = None
    # [position, reason] of single tokens of a trained segment that the update left
    # out of the loss (masked importance sampling: is_ratio; top_entropy_quantile:
    # low_entropy).
    masked: Annotated[
        list[tuple[Annotated[StrictInt, Field(ge=0, lt=2**31)], Short]],
        Field(max_length=MAX_TOKENS),
    ] = []

    @model_validator(mode="after")
    def _aligned(self) -> Segment:
        """Every per-token value belongs to a token: an array longer than the
        segment's tokens (``token_ids`` or ``tokens``, the longer), or a position
        past them, would be cut or dropped where it is stored, so it is refused."""
        n = max(len(self.token_ids), len(self.tokens))
        arrays = {name: getattr(self, name) for name in PER_TOKEN}
        arrays.update({f"series.{k}": v for k, v in self.series.items()})
        for name, values in arrays.items():
            if len(values) > n:
                raise ValueError(
                    f"{name}: {len(values)} values for {n} tokens (token_ids or "
                    "tokens give the segment's tokens, one value each)"
                )
        for name in ("special", "turns", "masked"):
            for item in getattr(self, name):
                pos = item if isinstance(item, int) else item[0]
                if pos >= n:
                    raise ValueError(
                        f"{name}: position {pos} is past the segment's {n} tokens"
                    )
        return self


# A segment's arrays of one value a token, besides its token_ids and tokens.
PER_TOKEN = ("token_text", "logprob", "old_logprob", "ratio", "entropy", "advantage")


class Rewards(_Event):
    total: OptNum = None
    components: Annotated[dict[Key, OptNum], Field(max_length=MAX_METRICS)] = {}
    per_step: Annotated[
        dict[Key, Annotated[list[OptNum], Field(max_length=MAX_ITEMS)]],
        Field(max_length=MAX_METRICS),
    ] = {}
    # Another trainer's raw scores (TRL's reward functions) and what each weighs in
    # the total: the total is their weighted sum (trainer.events).
    weights: Annotated[dict[Key, OptNum], Field(max_length=MAX_METRICS)] = {}


class TrajectoryEvent(_Event):
    type: Literal["trajectory"]
    step: Step
    group: Index
    index: Index
    task_id: Short = ""
    dropped: StrictBool = False
    reward: OptNum = None
    advantage: OptNum = None
    rewards: Rewards = Rewards()
    num_turns: Annotated[StrictInt, Field(ge=0, lt=2**31)] = 0
    length: Annotated[StrictInt, Field(ge=0, lt=2**31)] = 0
    truncated: StrictBool = False
    facts: dict[str, Any] = {}
    # Per-trajectory numbers the server's detectors read as evidence (optional).
    metrics: Annotated[dict[Key, OptNum], Field(max_length=MAX_METRICS)] = {}
    steps: Annotated[list[dict[str, Any]], Field(max_length=MAX_ITEMS)] = []
    segments: Annotated[list[Segment], Field(max_length=MAX_SEGMENTS)] = []


class JudgementEvent(_Event):
    type: Literal["judgement"]
    step: Step
    group: Index
    index: Index
    judge: Annotated[str, Field(min_length=1, max_length=64)]
    backend: Annotated[str, Field(max_length=32)] = ""
    ok: StrictBool = True
    score: OptNum = None
    scores: Annotated[dict[Key, OptNum], Field(max_length=MAX_METRICS)] = {}
    rationale: Text = ""
    raw: Text | None = None
    error: Text | None = None
    target_step: Step | None = None


Count = Annotated[StrictInt, Field(ge=0, lt=2**31)]


class SubAgent(_Event):
    subtask: Short | StrictInt = ""
    steps: Count = 0
    success: StrictBool = True


class Stage(_Event):
    orchestrator_steps: Count = 0
    subagents: Annotated[list[Count | SubAgent], Field(max_length=MAX_SUBAGENTS)] = []


# A stage as the trainer writes it (an object) or as (orchestrator steps, [steps]).
StageShape = (
    Stage | tuple[Count, Annotated[list[Count], Field(max_length=MAX_SUBAGENTS)]]
)


def _bounded_subagents(stages: list) -> list:
    total = sum(len(s.subagents if isinstance(s, Stage) else s[1]) for s in stages)
    if total > MAX_PATH_SUBAGENTS:
        raise ValueError(
            f"{total} sub-agents in all; at most {MAX_PATH_SUBAGENTS} a rollout "
            "(each is a bar of its timeline)"
        )
    return stages


class CriticalPathEvent(_Event):
    type: Literal["critical_path"]
    step: Step
    group: Index
    index: Index
    stages: Annotated[
        list[StageShape],
        Field(max_length=MAX_STAGES),
        AfterValidator(_bounded_subagents),
    ] = []
    critical_steps: Count = 0
    total_steps: Count = 0
    # Each stage's slowest sub-agent (None: a stage with none).
    path: Annotated[list[Count | None], Field(max_length=MAX_STAGES)] = []


class AlertTrajectory(_Event):
    """A trajectory of the alert's step that made it fire."""

    group: Index
    index: Index
    task_id: Short = ""
    why: Short = ""


class AlertEvent(_Event):
    type: Literal["alert"]
    step: Step
    detector: Annotated[str, Field(min_length=1, max_length=64)]
    severity: Annotated[str, Field(min_length=1, max_length=16)] = "warning"
    message: Annotated[str, Field(max_length=10_000)] = ""
    evidence: dict[str, Any] = {}
    # Absent in older events: an alert that names no trajectory.
    trajectories: Annotated[
        list[AlertTrajectory], Field(max_length=MAX_ALERT_TRAJECTORIES)
    ] = []


class CheckpointEvent(_Event):
    type: Literal["checkpoint"]
    step: Step
    path: Annotated[str, Field(max_length=1024)] = ""
    # The attempt that saved it (an export's; a trainer's sink knows its own).
    attempt: Annotated[StrictInt, Field(ge=0, lt=2**31)] | None = None


class WarmstartEvent(_Event):
    """Progress of the warm start before step 1: ``done`` of ``of`` behaviour-cloning
    steps, the last loss. Sent at least every few seconds while it lasts, so it is
    also the run's heartbeat."""

    type: Literal["warmstart"]
    done: Annotated[StrictInt, Field(ge=0, lt=2**31)]
    of: Annotated[StrictInt, Field(ge=0, lt=2**31)]
    loss: OptNum = None


class RunFinished(_Event):
    type: Literal["run_finished"]
    status: Literal["succeeded", "failed", "cancelled"]
    step: Step | None = None
    error: Text | None = None


Event = Annotated[
    RunStarted
    | StepEvent
    | TrajectoryEvent
    | JudgementEvent
    | CriticalPathEvent
    | AlertEvent
    | CheckpointEvent
    | WarmstartEvent
    | RunFinished,
    Field(discriminator="type"),
]
EVENT_TYPES = (
    "run_started",
    "step",
    "trajectory",
    "judgement",
    "critical_path",
    "alert",
    "checkpoint",
    "warmstart",
    "run_finished",
)
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)
_TYPE_LABELS = frozenset({"float", "int", "str", "bool", "none", "dict", "list"})


class EventError(ValueError):
    """A line that is not an event: ``field`` is a dotted path, ``message`` why."""

    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def check_event(event: Any) -> None:
    """Raise :class:`EventError` naming the first bad field of ``event``."""
    if not isinstance(event, dict):
        raise EventError("(line)", "an event must be a JSON object")
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        raise EventError("type", f"must be one of {', '.join(EVENT_TYPES)}")
    try:
        _ADAPTER.validate_python(event)
    except ValidationError as exc:
        err = exc.errors()[0]
        # The path starts with the discriminator's tag, and a union's member names
        # ("float", "literal['NaN', ...]") are not fields: drop both.
        loc = [str(p) for p in err.get("loc", ())[1:] if str(p) not in _TYPE_LABELS]
        loc = [p or '""' for p in loc if "[" not in p]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise EventError(".".join(loc) or "(event)", msg) from None


def events_json_schema() -> dict[str, Any]:
    """The JSON Schema of one event line (served at ``/api/events/schema.json``)."""
    schema = _ADAPTER.json_schema()
    schema["title"] = "Trainer event"
    schema["description"] = (
        "One line of events.jsonl / one line of POST /api/runs/{id}/events. "
        "Non-finite numbers are the strings NaN, Infinity, -Infinity."
    )
    return schema
