"""The ``calc`` environment: word problems, the calculator tool, the answer."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from trainer.envs.base import ENVIRONMENTS, Task, make_env
from trainer.envs.calc import CalcEnv, CalcParams, read_number, say_number

MALFORMED = [
    "",
    "   ",
    "garbage",
    "calc",
    "calc 3 +",
    "calc + 3",
    "calc 3 / 4",
    "calc 3 + 4 + 5",
    "calc - - 3",
    "calc three + 4",
    "answer",
    "answer -",
    "answer 1 2 3 4 5 6 7 8 9 0 1 2 3",
    "answer ١٢",
    "answer ７",
    "ÄÖÜ 😀 \x00",
    "x" * 100_000,
    "answer " + "1 " * 5_000,
    "CALC 3 + 4",
]


def play(env: CalcEnv, task: Task, actions: list[str]):
    session = env.start(task)
    results = [session.step(a) for a in actions]
    return session, results


def first_task(env: CalcEnv, seed: int = 0) -> Task:
    return env.sample_tasks(1, random.Random(seed))[0]


def test_it_is_registered_and_built_by_make_env():
    assert "calc" in ENVIRONMENTS
    assert isinstance(make_env("calc", {"max_operand": 5}, seed=3), CalcEnv)


def test_numbers_are_written_digit_by_digit():
    assert say_number(12) == "1 2"
    assert say_number(-3) == "- 3"
    assert say_number(0) == "0"
    assert read_number(["1", "2"]) == 12
    assert read_number(["-", "4", "0"]) == -40
    assert read_number(["12"]) == 12
    assert read_number([]) is None
    assert read_number(["٣"]) is None


def test_the_calculator_evaluates_one_operation():
    env = CalcEnv()
    session = env.start(first_task(env))
    assert session.step("calc 7 + 5").observation == "= 1 2"
    assert session.step("  calc   3  -   9 ").observation == "= - 6"
    result = session.step("calc 1 2 * - 3")
    assert result.observation == "= - 3 6"
    assert result.facts.facts == {"expression": "12 * -3", "result": -36, "hit": False}
    assert result.facts.tool == "calc" and result.facts.ok and not result.done


def test_same_seed_gives_same_tasks_and_observations():
    env_a, env_b = CalcEnv(seed=1), CalcEnv(seed=1)
    tasks_a = env_a.sample_tasks(20, random.Random(7))
    tasks_b = env_b.sample_tasks(20, random.Random(7))
    assert tasks_a == tasks_b
    actions = ["calc 4 * 4", "answer 1 6"]
    obs_a = [r.observation for r in play(env_a, tasks_a[0], actions)[1]]
    obs_b = [r.observation for r in play(env_b, tasks_b[0], actions)[1]]
    assert obs_a == obs_b


def test_a_good_policy_succeeds_and_a_bad_one_fails():
    env = CalcEnv()
    for task in env.sample_tasks(50, random.Random(0)):
        symbol = {"add": "+", "sub": "-", "mul": "*"}[task.payload["op"]]
        a, b = say_number(task.payload["a"]), say_number(task.payload["b"])
        session, results = play(env, task, [f"calc {a} {symbol} {b}"])
        answer = results[0].observation.removeprefix("= ")
        result = session.step("answer " + answer)
        assert result.done and result.facts.facts["correct"]
        facts = session.episode(truncated=False).facts
        assert (
            facts["success"] and facts["used_calculator"] and facts["computed_expected"]
        )

        wrong = say_number(task.payload["expected"] + 1)
        session, results = play(env, task, ["answer " + wrong])
        facts = session.episode(truncated=False).facts
        assert results[0].done and not facts["success"] and not facts["used_calculator"]
        assert facts["expected"] == task.payload["expected"]


def test_subtraction_problems_never_go_below_zero():
    env = CalcEnv({"ops": ["sub"], "max_operand": 20})
    assert all(
        t.payload["expected"] >= 0 for t in env.sample_tasks(200, random.Random(1))
    )


@pytest.mark.parametrize("action", MALFORMED)
def test_malformed_actions_never_raise(action):
    env = CalcEnv()
    session = env.start(first_task(env))
    result = session.step(action)
    assert not result.facts.ok and not result.done
    assert "error" in result.facts.facts
    assert set(result.observation.split()) <= set(env.vocabulary())
    assert result.observation.startswith("error")


def test_steps_after_the_answer_are_errors():
    env = CalcEnv()
    session, _ = play(env, first_task(env), ["answer 3"])
    result = session.step("answer 4")
    assert result.done and not result.facts.ok and result.facts.facts["error"] == "over"
    assert session.episode(truncated=False).facts["answer"] == 3


def test_a_truncated_episode_is_never_a_success():
    env = CalcEnv()
    task = first_task(env)
    session, _ = play(env, task, ["answer " + say_number(task.payload["expected"])])
    assert not session.episode(truncated=True).facts["success"]
    session = env.start(task)
    facts = session.episode(truncated=True).facts
    assert facts["answer"] is None and not facts["success"] and facts["truncated"]


@pytest.mark.parametrize(
    "params",
    [
        {"max_operand": -1},
        {"max_operand": 10**9},
        {"min_operand": 5, "max_operand": 3},
        {"ops": []},
        {"ops": ["div"]},
        {"colour": "red"},
    ],
)
def test_params_reject_bad_values(params):
    with pytest.raises(ValidationError):
        CalcParams.model_validate(params)
    with pytest.raises(ValidationError):
        CalcEnv(params)


def test_only_the_first_call_that_computes_the_answer_is_a_hit():
    env = CalcEnv()
    task = first_task(env)
    a, b = task.payload["a"], task.payload["b"]
    op = {"add": "+", "sub": "-", "mul": "*"}[task.payload["op"]]
    session = env.start(task)
    expr = f"calc {' '.join(str(a))} {op} {' '.join(str(b))}"
    assert session.step(expr).facts.facts["hit"] is True
    assert session.step(expr).facts.facts["hit"] is False
