"""The API's request and response schemas."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Field, Schema
from pydantic import ConfigDict

from dashboard.reads import metrics as metric_reads

# Steps, indices and offsets fit a 32-bit column; a bigger one is a 400, not an
# integer the database cannot bind.
MAX_INT = 2**31 - 1


class RunOut(Schema):
    id: UUID
    name: str
    owner: str
    status: str
    queue: str
    attempt: int
    last_step: int
    frame_seq: int
    cancel_requested: bool
    pause_requested: bool = Field(
        False,
        description="Paused while running: it stops at its next step, keeping its "
        "state, and waits 'paused' until resumed.",
    )
    error: str
    last_reward: float | str | None = Field(
        None,
        description="The run's latest reward (in the list; an external run's under "
        'its trainer\'s name; non-finite as "NaN", "Infinity", "-Infinity").',
    )
    external: bool
    framework: str
    group: str
    parent: UUID | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None = Field(
        None,
        description="Wall time in seconds: the time the run's attempts ran (a pause "
        "in the queue not counted); an external run's to its last event.",
    )
    heartbeat_at: datetime | None
    demo: bool = False
    warmup: dict[str, Any] = Field(
        default_factory=dict,
        description="The warm start's last progress before step 1: "
        "{done, of, loss}; empty when none was reported.",
    )


class AheadOut(Schema):
    id: UUID
    name: str
    status: str
    demo: bool
    last_step: int
    steps: int | None
    warmup: dict[str, Any]


class WaitingOut(Schema):
    position: int = Field(description="1: the next run to start.")
    ahead: list[AheadOut] = Field(description="The nearest runs before it.")
    queue: str
    workers: int | None = Field(
        description="Live workers serving the queue (null: the embedded executor)."
    )
    text: str


class RunDetailOut(RunOut):
    config: dict[str, Any]
    waiting: WaitingOut | None = Field(
        None, description="A queued run's place in line and what it waits for."
    )


class RunList(Schema):
    count: int
    runs: list[RunOut]


class LaunchIn(Schema):
    model_config = ConfigDict(extra="forbid")
    config: dict[str, Any] = Field(
        description="A TrainConfig (see /api/config/schema)."
    )
    name: str | None = Field(
        None,
        description=(
            "Defaults to config.name; with neither, <env>-<preset>-<n> "
            "(calc-grpo-3: one past the caller's highest such name)."
        ),
    )


class CloneIn(Schema):
    model_config = ConfigDict(extra="forbid")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Deep-merged into the source config."
    )
    name: str | None = None


class RepairIn(Schema):
    model_config = ConfigDict(extra="forbid")
    weights: Any = Field(
        None,
        description="{component: base weight}; a component the run lacks is added.",
    )
    detector: Any = Field(None, description="The detector whose alert this repairs.")
    alert_step: Any = Field(
        None, description="That alert's step; null: the detector's first alert."
    )
    name: Any = Field(None, description="The clone's name.")


class ExternalIn(Schema):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The run's name in the dashboard.")
    framework: str | None = Field(
        None, description='What trains it: "agentic-rl", "trl", "verl", "import"...'
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="Any JSON config (shown and diffed)."
    )


class FinishIn(Schema):
    model_config = ConfigDict(extra="forbid")
    status: str = Field(description="succeeded, failed or cancelled.")
    error: str | None = None


class IngestOut(Schema):
    accepted: int = Field(description="Events that stored something new.")
    duplicates: int = Field(description="Events whose rows were all stored already.")
    conflicts: int = Field(
        description="Re-sent events that differ from what is stored (the first "
        "write is kept)."
    )
    conflicting: list[dict[str, Any]] = Field(
        description="The first conflicts: type, step, key, stored and sent values."
    )
    cancel_requested: bool


class ErrorOut(Schema):
    detail: str
    errors: list[str] = []


class MetricsQuery(Schema):
    keys: str = Field("", max_length=4000, description="Comma-separated metric names.")
    since_step: int = Field(-1, ge=-1, le=MAX_INT)
    points: int = Field(
        1000,
        ge=1,
        le=metric_reads.MAX_POINTS,
        description="Buckets at most (chart width).",
    )


class StepRange(Schema):
    step: int | None = Field(None, ge=0, le=MAX_INT)
    since_step: int = Field(-1, ge=-1, le=MAX_INT)
    limit: int = Field(200, ge=1, le=2000)
    offset: int = Field(0, ge=0, le=MAX_INT)


class TrajectoryPage(Schema):
    offset: int = Field(0, ge=0, le=MAX_INT, description="The first segment.")
    max_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_INT,
        description="Tokens in the page (default TRAJECTORY_PAGE_TOKENS, at most "
        "TRAJECTORY_MAX_TOKENS).",
    )
    max_chars: int | None = Field(
        None,
        ge=1,
        le=MAX_INT,
        description="Characters of text in the page (default TRAJECTORY_PAGE_CHARS, "
        "at most EVENT_MAX_TEXT_CHARS).",
    )


class WhatIfIn(Schema):
    model_config = ConfigDict(extra="forbid")
    weights: Any = Field(
        None, description="{component: base weight}; unnamed ones keep the run's."
    )
    steps: Any = Field(None, description="Training steps to recompute; null: all.")
    examples: Any = Field(
        None,
        description="Examples listed of each kind of change, the largest first "
        "(1-100; null: 5); example_counts says how many there were.",
    )
