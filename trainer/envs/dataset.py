"""``dataset``: the user's own prompts and reference answers, single-turn or with tools.

A task is one row of a JSONL, Parquet or CSV file (:mod:`trainer.envs.dataset_files`).
Rows are split once, deterministically by the run's seed, into ``train`` and a held-out
``test`` share (``holdout``); a run samples from ``split``. Without tools the first
action is the answer. With tools, an action holding a tool call
(``<tool_call>{json}</tool_call>``, or ``<tool> <text>`` for word-level models) runs
it and its result comes back as a ``tool`` message; the first action without one is
the answer. A malformed call is shown its error and the episode goes on.

This module owns what a row is and what a tool returned; it reports ``answer`` and
``reference`` facts and leaves how they are compared to the reward components
(``exact_match``, ``numeric_match``, ``regex_match``, ``contains`` in
:mod:`rewards.matching`). ``success`` is a normalised exact match, for detectors.
"""

from __future__ import annotations

import random
import re
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rewards.types import Episode, StepFacts
from trainer.envs.base import (
    ENVIRONMENTS,
    Environment,
    EnvParams,
    EnvSession,
    StepResult,
    Task,
)
from trainer.envs.dataset_files import Row, read_rows
from trainer.envs.tools import TOOLS, call_tool, parse_action
from trainer.tokenizer import DIGIT_PIECES

# ASCII digits only: the digit pieces are 0-9 (a fullwidth or Arabic-Indic digit is
# text, read as the word it is part of).
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_ASCII_DIGITS = frozenset("0123456789")
_KEY = r"^[A-Za-z0-9_.-]+$"


def _pieces(word: str) -> list[str]:
    """The vocabulary entries ``word`` needs, its digits read one at a time: a word
    with digits in it (``19?``, ``$5``, ``3.5%``, ``H2O``) is its text around the
    digits as pieces (``$``, ``##?``, ``##%``) and its digits as digit pieces, never
    one opaque word ("What is 10 plus 19?" made ``19?`` a token the model could not
    read or copy digit by digit). A plain number needs nothing: digit pieces only.

    >>> _pieces("19?"), _pieces("$5"), _pieces("-2.5"), _pieces("coins")
    (['##?'], ['$'], [], ['coins'])
    """
    if not _ASCII_DIGITS.intersection(word):
        return [word]
    if _NUMBER.fullmatch(word):
        return []
    runs = re.findall(r"[0-9]+|[^0-9]+", word)
    return [
        run if k == 0 else f"##{run}"
        for k, run in enumerate(runs)
        if run[0] not in _ASCII_DIGITS
    ]


class DatasetParams(EnvParams):
    """Parameters of the ``dataset`` environment."""

    path: str = Field(
        min_length=1, max_length=1024, description="JSONL, Parquet or CSV file."
    )
    format: Literal["auto", "jsonl", "parquet", "csv"] = Field(
        "auto", description="auto: from the file's extension."
    )
    prompt_key: str = Field(
        "prompt",
        min_length=1,
        max_length=64,
        pattern=_KEY,
        description="Field holding the prompt: a string or a list of chat messages.",
    )
    answer_key: str = Field(
        "answer",
        min_length=1,
        max_length=64,
        pattern=_KEY,
        description="Field holding the reference answer.",
    )
    id_key: str | None = Field(
        None,
        max_length=64,
        pattern=_KEY,
        description="Field holding a row id, which every row must have; blank: "
        "the row's line number.",
    )
    split: Literal["train", "test"] = Field(
        "train", description="Which side of the held-out split tasks come from."
    )
    holdout: float = Field(
        0.1, ge=0, le=0.9, description="Share of rows held out as the test split."
    )
    system_prompt: str | None = Field(
        None,
        max_length=8000,
        description="System message before every prompt (chat models); blank: with "
        "tools, one that describes them and how to call them; without, none.",
    )
    tools: list[str] = Field(
        default_factory=list,
        max_length=8,
        description="Tools the model may call, separated by commas; available: "
        f"{', '.join(TOOLS.names())}. Blank: none, the first action is the answer.",
    )
    corpus_path: str | None = Field(
        None,
        max_length=1024,
        description="search: the corpus file (one document a line, or JSONL "
        '{"id", "text"}).',
    )
    top_k: int = Field(3, ge=1, le=20, description="search: documents per query.")
    max_turns: int = Field(
        4,
        ge=1,
        le=64,
        description="Actions per episode; the last one must be the answer. The "
        "smaller of this and Rollout's max turns ends an episode: this one as "
        "unanswered, Rollout's as truncated.",
    )
    max_rows: int = Field(100_000, ge=1, le=10_000_000)

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in TOOLS:
                raise ValueError(
                    f"unknown tool {name!r} (known: {', '.join(TOOLS.names())})"
                )
        if len(set(v)) != len(v):
            raise ValueError("a tool is listed twice")
        return v

    @model_validator(mode="after")
    def _search_needs_corpus(self) -> DatasetParams:
        if "search" in self.tools and not self.corpus_path:
            raise ValueError("corpus_path: the search tool needs a corpus file")
        return self


def default_system_prompt(tools: list[str]) -> str | None:
    if not tools:
        return None
    lines = [TOOLS.get(t).description for t in tools]
    return (
        "You can call tools by writing "
        '<tool_call>{"name": ..., "arguments": {...}}</tool_call>. Tools:\n'
        + "\n".join(lines)
        + "\nWhen you know the answer, write it without a tool call."
    )


@ENVIRONMENTS.register("dataset")
class DatasetEnv(Environment):
    """Rows of a file; success = the normalised answer equals the reference."""

    name = "dataset"
    label = "your prompts and answers from a file"
    Params = DatasetParams
    params: DatasetParams

    def __init__(self, params=None, *, seed: int = 0) -> None:
        super().__init__(params, seed=seed)
        p = self.params
        self.rows: list[Row] = read_rows(
            p.path,
            fmt=p.format,
            prompt_key=p.prompt_key,
            answer_key=p.answer_key,
            id_key=p.id_key,
            max_rows=p.max_rows,
        )
        order = list(range(len(self.rows)))
        random.Random(seed).shuffle(order)
        cut = round(p.holdout * len(order))
        self.splits = {
            "test": sorted(order[:cut]),
            "train": sorted(order[cut:]),
        }
        if not self.splits[p.split]:
            raise ValueError(
                f"holdout: the {p.split!r} split of {len(self.rows)} rows is empty"
            )
        runners = {}
        for name in p.tools:
            runners[name] = TOOLS.get(name).build(p.model_dump())
        self.runners = runners
        self.steps_in_threads = all(TOOLS.get(t).thread_safe for t in p.tools)
        self.system = p.system_prompt or default_system_prompt(p.tools)

    def split_rows(self, split: str) -> list[Row]:
        return [self.rows[i] for i in self.splits[split]]

    @cached_property
    def _vocabulary(self) -> list[str]:
        # Numbers are not words: the tokenizer reads them digit by digit
        # (DIGIT_PIECES), so any number, a calculator's result too, can be read
        # and written, and copied digit by digit.
        words: set[str] = set(self.params.tools) | set(DIGIT_PIECES)
        for row in self.rows:
            for text in (row.prompt, row.answer):
                for w in text.split():
                    words.update(_pieces(w))
        if "calculator" in self.params.tools:
            words.update(["+", "-", "*", "/", "error:"])
        return sorted(words)

    def vocabulary(self) -> list[str]:
        return self._vocabulary

    def sample_tasks(self, n: int, rng: random.Random) -> list[Task]:
        """``n`` rows of the split, none twice while the split has rows not yet
        drawn by this call (a step of 4 groups on 60 rows drew one row for two of
        its groups: a duplicated group, and one task less): shuffled passes over
        the split, as a sampler of epochs draws them."""
        pool = self.splits[self.params.split]
        picks: list[int] = []
        while len(picks) < n:
            picks += rng.sample(pool, min(len(pool), n - len(picks)))
        return [self.task(self.rows[i]) for i in picks]

    def held_out_tasks(self, n: int, rng: random.Random) -> list[Task]:
        """From the split the run does not train on (``test`` unless the run trains
        on it, then ``train``)."""
        other = "train" if self.params.split == "test" else "test"
        pool = self.splits[other] or self.splits[self.params.split]
        return [self.task(self.rows[rng.choice(pool)]) for _ in range(n)]

    def task(self, row: Row) -> Task:
        messages = list(row.messages) or [{"role": "user", "content": row.prompt}]
        if self.system and not any(m["role"] == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": self.system})
        return Task(
            id=row.id,
            prompt=row.prompt,
            payload={"answer": row.answer, "line": row.line},
            messages=tuple(messages),
        )

    def start(self, task: Task) -> DatasetSession:
        return DatasetSession(self, task)


def normalise(text: str) -> str:
    """Lower case, single spaces, no surrounding punctuation or quotes."""
    return " ".join(text.lower().split()).strip(" .,;:!?\"'`")


class DatasetSession(EnvSession):
    def __init__(self, env: DatasetEnv, task: Task) -> None:
        self.env = env
        self.task = task
        self.steps: list[StepFacts] = []
        self.answer: str | None = None
        self.tool_calls = 0
        self.results: list[str] = []

    @property
    def done(self) -> bool:
        return self.answer is not None or len(self.steps) >= self.env.params.max_turns

    def step(self, action: str) -> StepResult:
        if self.done:
            facts = StepFacts(len(self.steps), action, None, False, "error: over", {})
            return StepResult("error: episode over", True, facts)
        parsed = parse_action(action, self.env.params.tools)
        idx = len(self.steps)
        if parsed.kind == "answer":
            self.answer = action.strip()
            facts = StepFacts(idx, action, "answer", True, "", {"answer": self.answer})
        elif parsed.kind == "malformed":
            obs = str(parsed.error)
            facts = StepFacts(idx, action, None, False, obs, {"error": obs})
        else:
            ok, obs = call_tool(self.env.runners, parsed)
            self.tool_calls += ok
            if ok:
                self.results.append(obs)
            info = {"name": parsed.name, "arguments": dict(parsed.arguments)}
            facts = StepFacts(idx, action, parsed.name, ok, obs, {"call": info})
        self.steps.append(facts)
        return StepResult(facts.observation, self.done, facts)

    def episode(self, *, truncated: bool) -> Episode:
        reference = str(self.task.payload["answer"])
        answered = self.answer is not None and not truncated
        facts: dict[str, Any] = {
            "answer": self.answer if answered else None,
            "reference": reference,
            "success": answered
            and normalise(self.answer or "") == normalise(reference),
            "tool_calls": self.tool_calls,
            "truncated": truncated,
        }
        return Episode(
            self.task.id, "dataset", self.task.prompt, tuple(self.steps), facts
        )

    def random_action(self, rng: random.Random) -> str:
        """A well-formed action from the context (warm start of a word-level model):
        a calculator call on two numbers of the prompt, or a number seen as the
        answer; which one, and which numbers, drawn uniformly."""
        seen = _NUMBER.findall(self.task.prompt)
        for r in self.results:
            seen += _NUMBER.findall(r)
        tools = self.env.params.tools
        last = len(self.steps) + 1 >= self.env.params.max_turns
        if "calculator" in tools and len(seen) >= 2 and not last and rng.random() < 0.5:
            a, b = rng.sample(seen, 2)
            return f"calculator {a} {rng.choice('+-*')} {b}"
        if seen:
            return rng.choice(seen)
        return rng.choice(self.task.prompt.split() or ["?"])
