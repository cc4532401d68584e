"""``calc``: arithmetic word problems solved with a calculator tool (outcome reward).

A task is a one-operation word problem ("tom has 7 apples and gets 5 more . how many
apples ?"). The agent may call ``calc <a> <op> <b>`` (observation ``= <result>``) and
ends the episode with ``answer <number>``. Numbers are written digit by digit
("1 2" is twelve, "- 3" is minus three) so the vocabulary stays tiny.

This module owns what a problem is, what the calculator does and what counts as a
correct answer; it reports facts (``expression``/``result``, ``answer``/``correct``,
``success``, ``used_calculator``) and must not know how they are turned into rewards.
"""

from __future__ import annotations

import random
from typing import Any, Literal

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

DIGITS = [str(d) for d in range(10)]
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
NAMES = ["tom", "ann", "sam", "mia", "leo", "eva"]
ITEMS = ["apples", "pens", "books", "coins", "cards", "eggs"]
# {n}: a name, {a}/{b}: operands, {i}: the item. One template per operation.
TEMPLATES: dict[str, tuple[str, str]] = {
    "add": ("+", "{n} has {a} {i} and gets {b} more . how many {i} ?"),
    "sub": ("-", "{n} has {a} {i} and gives away {b} . how many {i} are left ?"),
    "mul": ("*", "{n} has {a} bags with {b} {i} each . how many {i} ?"),
}
ERRORS = {
    "empty": "error empty action",
    "too_long": "error action too long",
    "unknown_tool": "error unknown tool",
    "bad_number": "error bad number",
    "bad_expression": "error bad expression",
    "over": "error episode over",
}
TOOL_WORDS = ["calc", "answer", "="]
MAX_ACTION_CHARS = 512
MAX_ACTION_WORDS = 32
MAX_NUMBER_DIGITS = 12  # keeps int() far from Python's digit limit and results small


def say_number(n: int) -> str:
    """12 -> "1 2", -3 -> "- 3": one word per digit."""
    sign = "- " if n < 0 else ""
    return sign + " ".join(str(abs(n)))


def read_number(words: list[str]) -> int | None:
    """The inverse of :func:`say_number`; None unless every word is ASCII digits
    (an optional leading "-" aside). Multi-digit words ("12") are accepted too."""
    negative = bool(words) and words[0] == "-"
    body = words[1:] if negative else words
    if not body or not all(w.isascii() and w.isdigit() for w in body):
        return None
    digits = "".join(body)
    if len(digits) > MAX_NUMBER_DIGITS:
        return None
    value = int(digits)
    return -value if negative else value


class CalcParams(EnvParams):
    """Parameters of the ``calc`` environment."""

    max_operand: int = Field(
        9, ge=1, le=999, description="Largest operand in a problem."
    )
    min_operand: int = Field(
        1, ge=0, le=999, description="Smallest operand in a problem."
    )
    ops: list[Literal["add", "sub", "mul"]] = Field(
        default_factory=lambda: ["add", "sub", "mul"],
        min_length=1,
        max_length=3,
        description="Operations the problems use (subtraction never goes below zero).",
    )

    @model_validator(mode="after")
    def _check_range(self) -> CalcParams:
        if self.min_operand > self.max_operand:
            raise ValueError(
                f"min_operand: must be at most max_operand ({self.max_operand})"
            )
        return self


@ENVIRONMENTS.register("calc")
class CalcEnv(Environment):
    """Word problems with a calculator tool; success = the exact answer."""

    steps_in_threads = True  # sessions share only read-only state

    name = "calc"
    label = "word problems with a calculator tool"
    Params = CalcParams
    params: CalcParams

    def vocabulary(self) -> list[str]:
        words = set(DIGITS) | set(OPERATORS) | set(NAMES) | set(ITEMS) | set(TOOL_WORDS)
        for _, template in TEMPLATES.values():
            words.update(w for w in template.split() if not w.startswith("{"))
        for message in ERRORS.values():
            words.update(message.split())
        return sorted(words)

    def sample_tasks(self, n: int, rng: random.Random) -> list[Task]:
        return [self._sample_task(rng) for _ in range(n)]

    def _sample_task(self, rng: random.Random) -> Task:
        p = self.params
        op = rng.choice(sorted(set(p.ops)))
        a = rng.randint(p.min_operand, p.max_operand)
        b = rng.randint(p.min_operand, p.max_operand)
        if op == "sub" and b > a:
            a, b = b, a  # a word problem never gives away more than it has
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        symbol, template = TEMPLATES[op]
        prompt = template.format(n=name, a=say_number(a), b=say_number(b), i=item)
        expected = OPERATORS[symbol](a, b)
        payload = {"op": op, "a": a, "b": b, "expected": expected}
        return Task(
            id=f"calc-{op}-{a}-{b}-{name}-{item}", prompt=prompt, payload=payload
        )

    def start(self, task: Task) -> CalcSession:
        return CalcSession(self, task)


class CalcSession(EnvSession):
    """One word problem in progress."""

    def __init__(self, env: CalcEnv, task: Task) -> None:
        self.env = env
        self.task = task
        self.expected = int(task.payload["expected"])
        self.steps: list[StepFacts] = []
        self.done = False
        self.answer: int | None = None
        self.calc_calls = 0
        self.computed_expected = False
        self.results: list[int] = []

    def step(self, action: str) -> StepResult:
        tool, ok, observation, facts = self._act(action)
        self.steps.append(
            StepFacts(len(self.steps), action, tool, ok, observation, facts)
        )
        return StepResult(observation, self.done, self.steps[-1])

    def _act(self, action: str) -> tuple[str | None, bool, str, dict[str, Any]]:
        if self.done:
            return None, False, ERRORS["over"], {"error": "over"}
        if len(action) > MAX_ACTION_CHARS:
            return None, False, ERRORS["too_long"], {"error": "too_long"}
        words = action.split()
        if not words:
            return None, False, ERRORS["empty"], {"error": "empty"}
        if len(words) > MAX_ACTION_WORDS:
            return None, False, ERRORS["too_long"], {"error": "too_long"}
        tool, args = words[0], words[1:]
        if tool == "calc":
            return self._calc(args)
        if tool == "answer":
            return self._answer(args)
        return None, False, ERRORS["unknown_tool"], {"error": "unknown_tool"}

    def _calc(self, args: list[str]) -> tuple[str, bool, str, dict[str, Any]]:
        # The operator is the first operator word after the (optional) sign of a.
        split = next((i for i, w in enumerate(args) if w in OPERATORS and i > 0), None)
        if split is None:
            return "calc", False, ERRORS["bad_expression"], {"error": "bad_expression"}
        a, b = read_number(args[:split]), read_number(args[split + 1 :])
        if a is None or b is None:
            return "calc", False, ERRORS["bad_expression"], {"error": "bad_expression"}
        result = OPERATORS[args[split]](a, b)
        self.calc_calls += 1
        self.results.append(result)
        # ``hit``: the first call that computes the right value (a process fact that a
        # reward can pay once, so repeating the call earns nothing more).
        hit = result == self.expected and not self.computed_expected
        self.computed_expected |= result == self.expected
        facts = {"expression": f"{a} {args[split]} {b}", "result": result, "hit": hit}
        return "calc", True, "= " + say_number(result), facts

    def _answer(self, args: list[str]) -> tuple[str, bool, str, dict[str, Any]]:
        value = read_number(args)
        if value is None:
            return "answer", False, ERRORS["bad_number"], {"error": "bad_number"}
        self.done = True
        self.answer = value
        return "answer", True, "", {"answer": value, "correct": value == self.expected}

    def episode(self, *, truncated: bool) -> Episode:
        success = self.answer == self.expected and not truncated
        answered = self.answer is not None and not truncated
        facts = {
            "success": success,
            # Partial credit: the calculator computed the right value and an answer was
            # given, but not that value. Nothing for an episode that never answers, so
            # calling the tool again and again is never worth more than answering.
            "partial": 0.5
            if (answered and self.computed_expected and not success)
            else 0.0,
            "answer": self.answer,
            "expected": self.expected,
            "used_calculator": self.calc_calls > 0,
            "calc_calls": self.calc_calls,
            "computed_expected": self.computed_expected,
            "op": str(self.task.payload["op"]),
            "truncated": truncated,
        }
        return Episode(self.task.id, "calc", self.task.prompt, tuple(self.steps), facts)

    def random_action(self, rng: random.Random) -> str:
        """A well-formed action whose numbers come from the context, the way a
        pretrained model's prior copies numbers it has seen; everything that makes an
        action *good* (calculator or not, which operator, which number to answer) is
        drawn uniformly, so what RL learns is not baked into the warm start."""
        a, b = int(self.task.payload["a"]), int(self.task.payload["b"])
        seen = [a, b, *self.results]
        if rng.random() < 0.5 and self.calc_calls < 2:
            x, y = (a, b) if rng.random() < 0.5 else (b, a)
            op = rng.choice(sorted(OPERATORS))
            return f"calc {say_number(x)} {op} {say_number(y)}"
        return "answer " + say_number(rng.choice(seen))
