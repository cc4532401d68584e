"""``search``: a Context-1 style retrieval agent over a generated corpus.

The agent answers a multi-hop question by collecting the *set* of documents that
support it. Tools (one per action):

* ``search <words>``: BM25 (bm25s) top-k; new hits enter the context ("surfaced");
  past ``context_budget`` documents the oldest are evicted.
* ``read <doc>``: the text of a document surfaced earlier in the episode.
* ``prune <doc> [<doc> ...]``: drop documents from the context.
* ``answer``: stop; the documents still in the context are the result.

This module owns the corpus index, the context and what success means (every gold
document retained at ``answer``). It reports per-step and episode facts rich enough
for F-beta, trajectory recall, prune-pattern and single-search-exit rewards, and must
not know how those rewards are computed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
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
from trainer.envs.bm25 import new_index
from trainer.envs.search_corpus import (
    QUESTION_KINDS,
    QUESTIONS,
    World,
    build_world,
    index_words,
)

TOOLS = ("search", "read", "prune", "answer")
OBSERVATION_WORDS = [
    "person",
    "company",
    "city",
    "evicted",
    "pruned",
    "kept",
    "nothing",
    "no",
    "results",
]
ERRORS = {
    "empty": "error empty action",
    "too_long": "error action too long",
    "unknown_tool": "error unknown tool",
    "bad_arity": "error wrong number of words",
    "unknown_word": "error unknown word",
    "unknown_doc": "error unknown doc",
    "not_surfaced": "error doc not surfaced",
    "not_in_context": "error doc not in context",
    "over": "error episode over",
}
MAX_ACTION_CHARS = 512
MAX_ACTION_WORDS = 32
QuestionKind = Literal[
    "founder_city", "founder_region", "product_founder", "product_birthplace"
]


class SearchParams(EnvParams):
    """Parameters of the ``search`` environment (the corpus is built from the seed)."""

    num_people: int = Field(30, ge=4, le=40, description="Person documents.")
    num_companies: int = Field(20, ge=2, le=25, description="Company documents.")
    num_cities: int = Field(12, ge=2, le=12, description="City documents.")
    top_k: int = Field(3, ge=1, le=10, description="Documents one search returns.")
    context_budget: int = Field(
        6,
        ge=1,
        le=40,
        description="Documents the context holds; the oldest are evicted.",
    )
    max_query_words: int = Field(6, ge=1, le=16, description="Words in one query.")
    questions: list[QuestionKind] = Field(
        default_factory=lambda: list(QUESTION_KINDS),
        min_length=1,
        max_length=len(QUESTION_KINDS),
        description="Question kinds: two-document (founder_city, product_founder) or "
        "three-document (founder_region, product_birthplace) gold sets.",
    )

    @model_validator(mode="after")
    def _check_sizes(self) -> SearchParams:
        if self.num_companies > self.num_people:
            raise ValueError(
                "num_companies: must be at most num_people (one founder each)"
            )
        if self.top_k > self.context_budget:
            raise ValueError("top_k: must be at most context_budget")
        return self


@ENVIRONMENTS.register("search")
class SearchEnv(Environment):
    """Multi-hop retrieval with search / read / prune / answer."""

    steps_in_threads = True  # sessions share only read-only state

    name = "search"
    label = "multi-hop retrieval (F-beta recall)"
    Params = SearchParams
    params: SearchParams

    def __init__(
        self, params: EnvParams | Mapping[str, Any] | None = None, *, seed: int = 0
    ) -> None:
        super().__init__(params, seed=seed)
        p = self.params
        self.world: World = build_world(
            seed, p.num_people, p.num_companies, p.num_cities
        )
        self.docs = {d.name: d for d in self.world.docs}
        self.doc_names = [d.name for d in self.world.docs]
        # Built once per instance: a search is then one sparse dot product.
        self.index = new_index([index_words(d.text) for d in self.world.docs])
        self.query_words = sorted(
            {w for d in self.world.docs for w in index_words(d.text)}
        )
        self.query_word_set = frozenset(self.query_words)
        # Words in more than a tenth of the documents ("company", "founded"...) carry
        # almost no BM25 weight (low IDF); the warm-start prior leaves them out.
        df: dict[str, int] = {}
        for d in self.world.docs:
            for w in set(index_words(d.text)):
                df[w] = df.get(w, 0) + 1
        limit = max(1, len(self.world.docs) // 10)
        self.informative_words = frozenset(w for w, n in df.items() if n <= limit)
        self.words = frozenset(self._build_vocabulary())

    def _build_vocabulary(self) -> set[str]:
        words = set(TOOLS) | set(OBSERVATION_WORDS)
        for doc in self.world.docs:
            words.update(doc.text.split())
        for template in QUESTIONS.values():
            words.update(w for w in template.split() if not w.startswith("{"))
        for message in ERRORS.values():
            words.update(message.split())
        return words

    def vocabulary(self) -> list[str]:
        return sorted(self.words)

    def retrieve(self, words: list[str]) -> list[str]:
        """Top-k doc ids for a query, best first; ties broken by corpus order."""
        query = [w for w in index_words(" ".join(words)) if w in self.index.vocab_dict]
        if not query:
            return []
        scores = self.index.get_scores(query)
        order = np.argsort(-scores, kind="stable")[: self.params.top_k]
        return [self.doc_names[i] for i in order if scores[i] > 0]

    def sample_tasks(self, n: int, rng: random.Random) -> list[Task]:
        tasks = []
        for _ in range(n):
            kind = rng.choice(self.params.questions)
            prompt, gold = self.world.question(kind, rng)
            task_id = f"search-{kind}-" + "-".join(gold)
            tasks.append(Task(task_id, prompt, {"kind": kind, "gold": gold}))
        return tasks

    def start(self, task: Task) -> SearchSession:
        return SearchSession(self, task)


class SearchSession(EnvSession):
    """One question in progress: the context, what was surfaced, what was pruned."""

    def __init__(self, env: SearchEnv, task: Task) -> None:
        self.env = env
        self.task = task
        self.gold: list[str] = list(task.payload["gold"])
        self.context: list[str] = []  # retained docs, oldest first
        self.surfaced_all: list[str] = []  # every doc ever surfaced, first time order
        self.steps: list[StepFacts] = []
        self.done = False
        self.answered = False
        self.num_searches = 0
        self.num_reads = 0
        self.prune_sizes: list[int] = []
        self.evicted_all: list[str] = []

    def _facts(self, **extra: Any) -> dict[str, Any]:
        # Every step carries the same list keys so rewards can read them blindly.
        facts: dict[str, Any] = {
            "results": [],
            "surfaced": [],
            "surfaced_gold": [],
            "retained": list(self.context),
            "pruned": [],
            "evicted": [],
        }
        facts.update(extra)
        return facts

    def step(self, action: str) -> StepResult:
        tool, ok, observation, facts = self._act(action)
        self.steps.append(
            StepFacts(len(self.steps), action, tool, ok, observation, facts)
        )
        return StepResult(observation, self.done, self.steps[-1])

    def _error(self, tool: str | None, key: str) -> tuple[str | None, bool, str, dict]:
        return tool, False, ERRORS[key], self._facts(error=key)

    def _act(self, action: str) -> tuple[str | None, bool, str, dict[str, Any]]:
        if self.done:
            return self._error(None, "over")
        words = action.split() if len(action) <= MAX_ACTION_CHARS else None
        if words is None or len(words) > MAX_ACTION_WORDS:
            return self._error(None, "too_long")
        if not words:
            return self._error(None, "empty")
        tool, args = words[0], words[1:]
        if tool == "search":
            return self._search(args)
        if tool == "read":
            return self._read(args)
        if tool == "prune":
            return self._prune(args)
        if tool == "answer":
            if args:
                return self._error("answer", "bad_arity")
            self.done = self.answered = True
            return "answer", True, "", self._facts()
        return self._error(None, "unknown_tool")

    def _search(self, args: list[str]) -> tuple[str, bool, str, dict[str, Any]]:
        if not args or len(args) > self.env.params.max_query_words:
            return self._error("search", "bad_arity")
        if any(w not in self.env.words for w in args):
            return self._error("search", "unknown_word")
        self.num_searches += 1
        results = self.env.retrieve(args)
        surfaced = [d for d in results if d not in self.context]
        self.context.extend(surfaced)
        self.surfaced_all.extend(d for d in results if d not in self.surfaced_all)
        # top_k <= context_budget, so only docs from earlier steps are evicted.
        overflow = max(0, len(self.context) - self.env.params.context_budget)
        evicted, self.context = self.context[:overflow], self.context[overflow:]
        self.evicted_all.extend(evicted)
        hits = " . ".join(f"{d} {self.env.docs[d].kind}" for d in results)
        observation = hits or "no results"
        if evicted:
            observation += " . evicted " + " ".join(evicted)
        gold = [d for d in surfaced if d in self.gold]
        facts = self._facts(
            results=results, surfaced=surfaced, surfaced_gold=gold, evicted=evicted
        )
        return "search", True, observation, facts

    def _read(self, args: list[str]) -> tuple[str, bool, str, dict[str, Any]]:
        if len(args) != 1:
            return self._error("read", "bad_arity")
        doc = args[0]
        if doc not in self.env.docs:
            return self._error("read", "unknown_doc")
        if doc not in self.surfaced_all:
            return self._error("read", "not_surfaced")
        self.num_reads += 1
        facts = self._facts(read=doc, read_gold=doc in self.gold)
        return "read", True, self.env.docs[doc].text, facts

    def _prune(self, args: list[str]) -> tuple[str, bool, str, dict[str, Any]]:
        if not args:
            return self._error("prune", "bad_arity")
        docs = list(dict.fromkeys(args))  # a repeated id is pruned once
        if any(d not in self.env.docs for d in docs):
            return self._error("prune", "unknown_doc")
        if any(d not in self.context for d in docs):
            return self._error("prune", "not_in_context")
        self.context = [d for d in self.context if d not in docs]
        self.prune_sizes.append(len(docs))
        kept = " ".join(self.context) or "nothing"
        return (
            "prune",
            True,
            f"pruned {' '.join(docs)} . kept {kept}",
            self._facts(pruned=docs),
        )

    def _seen_query_words(self) -> list[str]:
        text = [self.task.prompt, *(s.observation for s in self.steps)]
        allowed = self.env.informative_words
        words = dict.fromkeys(w for t in text for w in t.split() if w in allowed)
        return list(words)

    def episode(self, *, truncated: bool) -> Episode:
        retained_gold = [d for d in self.gold if d in self.context]
        facts = {
            "gold": list(self.gold),
            "retained": list(self.context),
            "retained_gold": retained_gold,
            "surfaced_all": list(self.surfaced_all),
            "evicted_all": list(self.evicted_all),
            "num_searches": self.num_searches,
            "num_reads": self.num_reads,
            "num_prunes": len(self.prune_sizes),
            "prune_sizes": list(self.prune_sizes),
            "answered": self.answered,
            "question_kind": str(self.task.payload["kind"]),
            "success": self.answered
            and not truncated
            and len(retained_gold) == len(self.gold),
            "truncated": truncated,
        }
        return Episode(
            self.task.id, "search", self.task.prompt, tuple(self.steps), facts
        )

    def random_action(self, rng: random.Random) -> str:
        tools = ["search", "answer"]
        if self.surfaced_all:
            tools.append("read")
        if self.context:
            tools.append("prune")
        tool = rng.choice(tools)
        if tool == "search":
            # Query words come from what the agent has seen (the question, what it
            # surfaced or read), as a pretrained model's prior would copy them; which
            # of them to search for is left to RL.
            seen = self._seen_query_words() or self.env.query_words
            count = rng.randint(1, min(3, self.env.params.max_query_words))
            return "search " + " ".join(rng.choice(seen) for _ in range(count))
        if tool == "read":
            return "read " + rng.choice(self.surfaced_all)
        if tool == "prune":
            count = rng.randint(1, min(3, len(self.context)))
            return "prune " + " ".join(rng.sample(self.context, count))
        return "answer"
