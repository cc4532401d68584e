"""``swarm``: a Kimi PARL style orchestrator over frozen, simulated sub-agents.

A task is a small DAG of subtasks named by letters ("a", "b", ...): the prompt lists
them and their dependencies ("subtasks a b c . c needs a b ."). Every action is one
*stage*:

* ``spawn <s> [<s> ...]``: frozen sub-agents work on those subtasks in parallel; the
  stage lasts 1 orchestrator step plus its slowest sub-agent.
* ``solve <s>``: the orchestrator does the subtask itself, serially: the stage costs
  the subtask's full cost in orchestrator steps.
* ``finish``: stop; success means every subtask completed.

Sub-agents are deterministic given (task, subtask, attempt): a subtask whose
dependencies are unfinished at the start of the stage is *blocked* and burns the whole
sub-agent budget; otherwise it takes its cost plus a little jitter and fails with
``failure_prob``. So spawning independent subtasks together lowers the critical steps
(sum over stages of orchestrator steps + slowest sub-agent), and spawning dependent
ones too early wastes them: the trade-off RL should learn.

This module owns the DAG, the simulation and the stage timeline; it reports them as
facts and must not know how rewards (r_perf, r_parallel, r_finish) are computed.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from pydantic import Field, model_validator

from rewards.types import Episode, StepFacts
from trainer.envs.base import (
    ENVIRONMENTS,
    Environment,
    EnvParams,
    EnvSession,
    StepResult,
    Task,
)

LETTERS = "abcdefghijkl"
DIGITS = [str(d) for d in range(10)]
TOOLS = ("spawn", "solve", "finish")
PROMPT_WORDS = ["subtasks", "needs", "."]
OUTCOME_WORDS = [
    "done",
    "failed",
    "blocked",
    "timeout",
    "in",
    "steps",
    "completed",
    "of",
]
ERRORS = {
    "empty": "error empty action",
    "too_long": "error action too long",
    "unknown_tool": "error unknown tool",
    "bad_arity": "error wrong number of subtasks",
    "unknown_subtask": "error unknown subtask",
    "duplicate": "error duplicate subtask",
    "over": "error episode over",
}
MAX_ACTION_CHARS = 512
MAX_ACTION_WORDS = 32


def say_number(n: int) -> str:
    """12 -> "1 2": one word per digit (the project's text protocol)."""
    return " ".join(str(n))


class SwarmParams(EnvParams):
    """Parameters of the ``swarm`` environment."""

    min_subtasks: int = Field(3, ge=1, le=len(LETTERS), description="Fewest subtasks.")
    max_subtasks: int = Field(5, ge=1, le=len(LETTERS), description="Most subtasks.")
    dependency_density: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Chance that a subtask depends on each earlier one.",
    )
    min_cost: int = Field(2, ge=1, le=20, description="Fewest steps a subtask takes.")
    max_cost: int = Field(5, ge=1, le=20, description="Most steps a subtask takes.")
    jitter: int = Field(1, ge=0, le=5, description="Extra sub-agent steps, 0..jitter.")
    subagent_max_steps: int = Field(
        8,
        ge=1,
        le=50,
        description="Sub-agent budget; a blocked sub-agent burns all of it.",
    )
    failure_prob: float = Field(
        0.1, ge=0, le=0.9, description="Chance an unblocked sub-agent still fails."
    )
    max_parallel: int = Field(
        6, ge=1, le=len(LETTERS), description="Sub-agents one spawn may start."
    )

    @model_validator(mode="after")
    def _check_ranges(self) -> SwarmParams:
        if self.min_subtasks > self.max_subtasks:
            raise ValueError("min_subtasks: must be at most max_subtasks")
        if self.min_cost > self.max_cost:
            raise ValueError("min_cost: must be at most max_cost")
        return self


@ENVIRONMENTS.register("swarm")
class SwarmEnv(Environment):
    """Orchestrate frozen sub-agents over a dependency DAG of subtasks."""

    steps_in_threads = True  # sessions share only read-only state
    orchestrates = True  # an orchestrator's stages of sub-agents

    name = "swarm"
    label = "orchestrator with parallel sub-agents (PARL)"
    Params = SwarmParams
    params: SwarmParams

    def vocabulary(self) -> list[str]:
        words = set(LETTERS) | set(DIGITS) | set(TOOLS) | set(PROMPT_WORDS)
        words |= set(OUTCOME_WORDS)
        for message in ERRORS.values():
            words.update(message.split())
        return sorted(words)

    def sample_tasks(self, n: int, rng: random.Random) -> list[Task]:
        return [self._sample_task(rng) for _ in range(n)]

    def _sample_task(self, rng: random.Random) -> Task:
        p = self.params
        names = list(LETTERS[: rng.randint(p.min_subtasks, p.max_subtasks)])
        # Dependencies only point to earlier letters, so the graph is a DAG.
        deps = {
            s: [t for t in names[:i] if rng.random() < p.dependency_density]
            for i, s in enumerate(names)
        }
        costs = {s: rng.randint(p.min_cost, p.max_cost) for s in names}
        nonce = rng.getrandbits(32)  # seeds the sub-agents of this task
        parts = [f"subtasks {' '.join(names)} ."]
        parts += [f"{s} needs {' '.join(d)} ." for s, d in deps.items() if d]
        key = f"{self.seed}|{names}|{deps}|{costs}|{nonce}"
        task_id = "swarm-" + hashlib.sha1(key.encode()).hexdigest()[:12]
        payload = {"subtasks": names, "deps": deps, "costs": costs, "nonce": nonce}
        return Task(task_id, " ".join(parts), payload)

    def start(self, task: Task) -> SwarmSession:
        return SwarmSession(self, task)


class SwarmSession(EnvSession):
    """One orchestration in progress: completed subtasks and the stage timeline."""

    def __init__(self, env: SwarmEnv, task: Task) -> None:
        self.env = env
        self.task = task
        self.subtasks: list[str] = list(task.payload["subtasks"])
        self.deps: dict[str, list[str]] = {
            s: list(d) for s, d in task.payload["deps"].items()
        }
        self.costs: dict[str, int] = dict(task.payload["costs"])
        self.completed: list[str] = []
        self.attempts: dict[str, int] = dict.fromkeys(self.subtasks, 0)
        self.stages: list[dict[str, Any]] = []
        self.steps: list[StepFacts] = []
        self.done = False
        self.finished = False

    def step(self, action: str) -> StepResult:
        if self.done:  # not a stage: the episode is over
            tool, ok, observation, stage, extra = None, False, ERRORS["over"], None, {}
            extra["error"] = "over"
        else:
            tool, ok, observation, stage, extra = self._act(action)
            self.stages.append(stage)
        facts = {"stage": stage, "completed": list(self.completed), "spawned": []}
        facts.update(extra)
        self.steps.append(
            StepFacts(len(self.steps), action, tool, ok, observation, facts)
        )
        kind = "subagent" if tool == "spawn" and ok else "tool"
        return StepResult(observation, self.done, self.steps[-1], observation_kind=kind)

    def _act(self, action: str) -> tuple[str | None, bool, str, dict, dict[str, Any]]:
        words = action.split() if len(action) <= MAX_ACTION_CHARS else None
        if words is None or len(words) > MAX_ACTION_WORDS:
            return self._error(None, "too_long")
        if not words:
            return self._error(None, "empty")
        tool, args = words[0], words[1:]
        if tool not in TOOLS:
            return self._error(None, "unknown_tool")
        if tool == "finish":
            if args:
                return self._error("finish", "bad_arity")
            self.done = self.finished = True
            observation = f"completed {say_number(len(self.completed))} of "
            observation += say_number(len(self.subtasks))
            return "finish", True, observation, _stage(1, []), {}
        limit = 1 if tool == "solve" else self.env.params.max_parallel
        if not 1 <= len(args) <= limit:
            return self._error(tool, "bad_arity")
        if any(a not in self.subtasks for a in args):
            return self._error(tool, "unknown_subtask")
        if len(set(args)) != len(args):
            return self._error(tool, "duplicate")
        return self._solve(args[0]) if tool == "solve" else self._spawn(args)

    def _error(
        self, tool: str | None, key: str
    ) -> tuple[str | None, bool, str, dict, dict]:
        # A malformed action still spends one orchestrator step (it is one stage).
        return tool, False, ERRORS[key], _stage(1, []), {"error": key}

    def _ready(self, subtask: str) -> bool:
        return all(d in self.completed for d in self.deps[subtask])

    def _run_subagent(self, subtask: str) -> dict[str, Any]:
        """The frozen sub-agent, deterministic per (env seed, task, subtask, attempt)."""
        p = self.env.params
        self.attempts[subtask] += 1
        key = f"{self.env.seed}|{self.task.payload['nonce']}|{subtask}|{self.attempts[subtask]}"
        rng = random.Random(key)
        steps = self.costs[subtask] + rng.randint(0, p.jitter)
        fails = rng.random() < p.failure_prob
        if not self._ready(subtask):
            outcome, steps = "blocked", p.subagent_max_steps
        elif steps > p.subagent_max_steps:
            outcome, steps = "timeout", p.subagent_max_steps
        else:
            outcome = "failed" if fails else "done"
        return {
            "subtask": subtask,
            "steps": steps,
            "success": outcome == "done",
            "outcome": outcome,
            "redundant": subtask in self.completed,
        }

    def _spawn(self, args: list[str]) -> tuple[str, bool, str, dict, dict[str, Any]]:
        # Readiness is judged at the start of the stage: parallel sub-agents cannot
        # use each other's results.
        runs = [self._run_subagent(s) for s in args]
        newly = [
            r["subtask"]
            for r in runs
            if r["success"] and r["subtask"] not in self.completed
        ]
        self.completed.extend(newly)
        observation = " . ".join(
            f"{r['subtask']} {r['outcome']} in {say_number(r['steps'])} steps"
            for r in runs
        )
        return (
            "spawn",
            True,
            observation,
            _stage(1, runs),
            {"spawned": list(args), "newly_completed": newly},
        )

    def _solve(self, subtask: str) -> tuple[str, bool, str, dict, dict[str, Any]]:
        cost = self.costs[subtask]
        ready = self._ready(subtask)
        newly = [subtask] if ready and subtask not in self.completed else []
        self.completed.extend(newly)
        outcome = "done" if ready else "blocked"
        observation = f"{subtask} {outcome} in {say_number(cost)} steps"
        extra = {"solved": subtask, "solve_success": ready, "newly_completed": newly}
        return "solve", True, observation, _stage(cost, []), extra

    def episode(self, *, truncated: bool) -> Episode:
        subagents = [r for stage in self.stages for r in stage["subagents"]]
        facts = {
            "stages": [
                {
                    "orchestrator_steps": s["orchestrator_steps"],
                    "subagents": [
                        {k: r[k] for k in ("subtask", "steps", "success")}
                        for r in s["subagents"]
                    ],
                }
                for s in self.stages
            ],
            "subtasks_assigned": len(self.subtasks),
            "subtasks_completed": len(self.completed),
            "completed": list(self.completed),
            "success": self.finished
            and not truncated
            and len(self.completed) == len(self.subtasks),
            "finished": self.finished,
            "num_subagents": len(subagents),
            "failed_subagents": sum(1 for r in subagents if not r["success"]),
            "blocked_subagents": sum(1 for r in subagents if r["outcome"] == "blocked"),
            "redundant_subagents": sum(1 for r in subagents if r["redundant"]),
            "critical_steps": critical_steps(self.stages),
            "total_steps": sum(s["orchestrator_steps"] for s in self.stages)
            + sum(r["steps"] for r in subagents),
            "truncated": truncated,
        }
        return Episode(
            self.task.id, "swarm", self.task.prompt, tuple(self.steps), facts
        )

    def random_action(self, rng: random.Random) -> str:
        pending = [s for s in self.subtasks if s not in self.completed] or self.subtasks
        tool = rng.choice(TOOLS)
        if tool == "spawn":
            count = rng.randint(1, min(len(pending), self.env.params.max_parallel))
            return "spawn " + " ".join(sorted(rng.sample(pending, count)))
        if tool == "solve":
            return "solve " + rng.choice(pending)
        return "finish"


def _stage(orchestrator_steps: int, subagents: list[dict[str, Any]]) -> dict[str, Any]:
    return {"orchestrator_steps": orchestrator_steps, "subagents": subagents}


def critical_steps(stages: list[dict[str, Any]]) -> int:
    """Sum over stages of orchestrator steps + the slowest sub-agent (PARL latency).

    A local copy for the episode facts; ``rewards.critical_steps`` is the reference.
    """
    return sum(
        s["orchestrator_steps"] + max((r["steps"] for r in s["subagents"]), default=0)
        for s in stages
    )
