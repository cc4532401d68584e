"""The ``swarm`` environment: DAG tasks, frozen sub-agents, stages, critical steps."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from trainer.envs.base import ENVIRONMENTS, Task, make_env
from trainer.envs.swarm import SwarmEnv, SwarmParams, critical_steps

MALFORMED = [
    "",
    "   ",
    "garbage",
    "spawn",
    "solve",
    "solve a b",
    "spawn z",
    "spawn a a",
    "finish now",
    "SPAWN a",
    "spawn a b c d e f g",  # more than max_parallel (6)
    "ÄÖÜ 😀 \x00",
    "x" * 100_000,
    "spawn " + "a " * 5_000,
]
RELIABLE = {"failure_prob": 0.0, "jitter": 0}


def make_task(
    deps: dict[str, list[str]], costs: dict[str, int], nonce: int = 1
) -> Task:
    payload = {"subtasks": list(deps), "deps": deps, "costs": costs, "nonce": nonce}
    return Task("swarm-test", "subtasks " + " ".join(deps) + " .", payload)


INDEPENDENT = make_task({"a": [], "b": [], "c": []}, {"a": 3, "b": 4, "c": 2})
CHAIN = make_task({"a": [], "b": ["a"]}, {"a": 3, "b": 3})


def play(env: SwarmEnv, task: Task, actions: list[str]):
    session = env.start(task)
    results = [session.step(a) for a in actions]
    return session, results


def wave_policy(session) -> None:
    """Spawn every ready, unfinished subtask each stage (retrying failures), then finish."""
    for _ in range(20):
        ready = [
            s
            for s in session.subtasks
            if s not in session.completed
            and all(d in session.completed for d in session.deps[s])
        ]
        if not ready:
            break
        session.step("spawn " + " ".join(ready[: session.env.params.max_parallel]))
    session.step("finish")


def test_it_is_registered_and_built_by_make_env():
    assert "swarm" in ENVIRONMENTS
    assert isinstance(make_env("swarm", {"max_subtasks": 8}, seed=2), SwarmEnv)


def test_tasks_are_dags_described_in_the_prompt():
    env = SwarmEnv({"min_subtasks": 4, "max_subtasks": 8, "dependency_density": 0.5})
    for task in env.sample_tasks(50, random.Random(0)):
        names = task.payload["subtasks"]
        assert 4 <= len(names) <= 8
        for i, name in enumerate(names):
            assert set(task.payload["deps"][name]) <= set(names[:i])
            if task.payload["deps"][name]:
                assert (
                    f"{name} needs {' '.join(task.payload['deps'][name])} ."
                    in task.prompt
                )


def test_same_seed_gives_same_tasks_and_observations():
    params = {"failure_prob": 0.5, "jitter": 3}
    env_a, env_b = SwarmEnv(params, seed=3), SwarmEnv(params, seed=3)
    tasks = env_a.sample_tasks(10, random.Random(4))
    assert tasks == env_b.sample_tasks(10, random.Random(4))
    actions = ["spawn a b", "spawn a", "solve b", "finish"]
    for task in tasks:
        obs_a = [r.observation for r in play(env_a, task, actions)[1]]
        obs_b = [r.observation for r in play(env_b, task, actions)[1]]
        assert obs_a == obs_b
    # The sub-agents' luck depends on the env seed too.
    env_c = SwarmEnv(params, seed=4)
    runs = {
        tuple(r.observation for r in play(env, task, actions)[1])
        for env in (env_a, env_c)
        for task in tasks
    }
    assert len(runs) > len(tasks)


def test_parallel_spawning_beats_serial_solving_on_independent_subtasks():
    env = SwarmEnv(RELIABLE)
    parallel, _ = play(env, INDEPENDENT, ["spawn a b c", "finish"])
    serial, _ = play(env, INDEPENDENT, ["solve a", "solve b", "solve c", "finish"])
    one_by_one, _ = play(env, INDEPENDENT, ["spawn a", "spawn b", "spawn c", "finish"])
    facts = [s.episode(truncated=False).facts for s in (parallel, serial, one_by_one)]
    assert all(f["success"] for f in facts)
    assert [f["critical_steps"] for f in facts] == [
        1 + 4 + 1,
        3 + 4 + 2 + 1,
        4 + 5 + 3 + 1,
    ]
    assert facts[0]["total_steps"] == 1 + 3 + 4 + 2 + 1
    assert facts[0]["num_subagents"] == 3 and facts[1]["num_subagents"] == 0


def test_spawning_before_the_dependencies_are_done_is_blocked_and_costly():
    env = SwarmEnv(RELIABLE)
    eager, results = play(env, CHAIN, ["spawn a b", "spawn b", "finish"])
    assert results[0].observation == "a done in 3 steps . b blocked in 8 steps"
    assert results[0].observation_kind == "subagent"
    assert results[0].facts.facts["completed"] == ["a"]
    staged, _ = play(env, CHAIN, ["spawn a", "spawn b", "finish"])
    eager_facts = eager.episode(truncated=False).facts
    staged_facts = staged.episode(truncated=False).facts
    assert eager_facts["success"] and staged_facts["success"]
    assert (
        eager_facts["blocked_subagents"] == 1 and staged_facts["blocked_subagents"] == 0
    )
    assert eager_facts["critical_steps"] == (1 + 8) + (1 + 3) + 1
    assert staged_facts["critical_steps"] == (1 + 3) + (1 + 3) + 1
    solve_early, results = play(env, CHAIN, ["solve b"])
    assert results[0].observation == "b blocked in 3 steps"
    assert results[0].facts.facts["completed"] == []


def test_step_facts_describe_the_stage():
    env = SwarmEnv(RELIABLE)
    _, results = play(env, INDEPENDENT, ["spawn c a", "solve b", "finish"])
    spawn = results[0].facts.facts
    assert spawn["spawned"] == ["c", "a"] and spawn["completed"] == ["c", "a"]
    assert spawn["stage"]["orchestrator_steps"] == 1
    assert [
        (r["subtask"], r["steps"], r["success"]) for r in spawn["stage"]["subagents"]
    ] == [
        ("c", 2, True),
        ("a", 3, True),
    ]
    solve = results[1].facts.facts
    assert solve["stage"] == {"orchestrator_steps": 4, "subagents": []}
    assert solve["solved"] == "b" and solve["spawned"] == []
    assert results[1].observation_kind == "tool"
    assert results[2].done and results[2].observation == "completed 3 of 3"


def test_a_wave_policy_succeeds_and_finishing_early_fails():
    env = SwarmEnv({"min_subtasks": 3, "max_subtasks": 8, "dependency_density": 0.4})
    for task in env.sample_tasks(50, random.Random(1)):
        session = env.start(task)
        wave_policy(session)
        facts = session.episode(truncated=False).facts
        assert facts["success"], task.prompt
        assert facts["critical_steps"] == critical_steps(session.stages)
        bad, _ = play(env, task, ["finish"])
        facts = bad.episode(truncated=False).facts
        assert not facts["success"] and facts["subtasks_completed"] == 0


def test_failures_are_retried_with_fresh_luck():
    env = SwarmEnv({"failure_prob": 0.5, "jitter": 0})
    session, results = play(env, INDEPENDENT, ["spawn a b c"] * 6)
    outcomes = [
        r["success"] for res in results for r in res.facts.facts["stage"]["subagents"]
    ]
    assert True in outcomes and False in outcomes
    facts = session.episode(truncated=False).facts
    assert facts["redundant_subagents"] > 0 and facts["failed_subagents"] > 0


def test_a_slow_subtask_times_out_past_the_subagent_budget():
    env = SwarmEnv({**RELIABLE, "subagent_max_steps": 3})
    _, results = play(env, INDEPENDENT, ["spawn b a"])
    assert results[0].observation == "b timeout in 3 steps . a done in 3 steps"


@pytest.mark.parametrize("action", MALFORMED)
def test_malformed_actions_never_raise(action):
    env = SwarmEnv()
    session = env.start(INDEPENDENT)
    result = session.step(action)
    assert not result.facts.ok and not result.done
    assert "error" in result.facts.facts
    assert result.facts.facts["stage"] == {"orchestrator_steps": 1, "subagents": []}
    assert result.observation.startswith("error")
    assert set(result.observation.split()) <= set(env.vocabulary())


def test_steps_after_finish_are_errors_and_truncation_is_never_success():
    env = SwarmEnv(RELIABLE)
    session, _ = play(env, INDEPENDENT, ["spawn a b c", "finish"])
    result = session.step("spawn a")
    assert result.done and not result.facts.ok and result.facts.facts["error"] == "over"
    assert len(session.stages) == 2
    assert session.episode(truncated=False).facts["success"]
    assert not session.episode(truncated=True).facts["success"]


@pytest.mark.parametrize(
    "params",
    [
        {"min_subtasks": 0},
        {"max_subtasks": 99},
        {"min_subtasks": 5, "max_subtasks": 3},
        {"min_cost": 4, "max_cost": 2},
        {"failure_prob": -0.1},
        {"failure_prob": 1.0},
        {"dependency_density": 2},
        {"subagent_max_steps": 10**6},
        {"workers": 3},
    ],
)
def test_params_reject_bad_values(params):
    with pytest.raises(ValidationError):
        SwarmParams.model_validate(params)
