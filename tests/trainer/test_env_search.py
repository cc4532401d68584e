"""The ``search`` environment: corpus, BM25, context budget, prune, facts."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from trainer.envs.base import ENVIRONMENTS, Task, make_env
from trainer.envs.search import SearchEnv, SearchParams
from trainer.envs.search_corpus import build_world

MALFORMED = [
    "",
    "  \t ",
    "garbage",
    "search",
    "search zzzz",
    "search " + "alba " * 20,
    "read",
    "read nosuchdoc",
    "read a b",
    "prune",
    "prune nosuchdoc",
    "answer now",
    "Search alba",
    "ÄÖÜ 😀 \x00",
    "x" * 100_000,
    "prune " + "a " * 5_000,
]


def first_task(env: SearchEnv, kind: str = "founder_city") -> Task:
    return next(
        t for t in env.sample_tasks(50, random.Random(0)) if t.payload["kind"] == kind
    )


def oracle_policy(session, gold: list[str]) -> None:
    """Search each gold doc by name, drop everything else, answer."""
    for doc in gold:
        session.step(f"search {doc}")
        junk = [d for d in session.context if d not in gold]
        if junk:
            session.step("prune " + " ".join(junk))
    session.step("answer")


def test_it_is_registered_and_built_by_make_env():
    assert "search" in ENVIRONMENTS
    assert isinstance(make_env("search", {"top_k": 2}, seed=4), SearchEnv)


def test_the_corpus_is_deterministic_and_depends_on_the_seed():
    assert build_world(3, 30, 20, 12) == build_world(3, 30, 20, 12)
    assert build_world(3, 30, 20, 12).docs != build_world(4, 30, 20, 12).docs
    env = SearchEnv()
    assert len(env.world.docs) == 62
    assert len({d.name for d in env.world.docs}) == 62


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bm25_surfaces_a_doc_for_its_own_words(seed):
    env = SearchEnv(seed=seed)
    for doc in env.world.docs:
        assert env.retrieve([doc.name])[0] == doc.name
    for company, product in env.world.product_of.items():
        assert env.retrieve(["makes", product])[0] == company
    for company, founder in env.world.founder_of.items():
        assert env.retrieve(["founded", company])[:2] in (
            [company, founder],
            [founder, company],
        )


def test_same_seed_gives_same_tasks_and_observations():
    env_a, env_b = SearchEnv(seed=5), SearchEnv(seed=5)
    assert env_a.vocabulary() == env_b.vocabulary()
    tasks_a = env_a.sample_tasks(20, random.Random(9))
    assert tasks_a == env_b.sample_tasks(20, random.Random(9))
    actions = [f"search {tasks_a[0].payload['gold'][0]}", "prune x", "answer"]
    obs = [
        [env.start(tasks_a[0]).step(a).observation for a in actions]
        for env in (env_a, env_b)
    ]
    assert obs[0] == obs[1]


def test_an_oracle_policy_succeeds_on_every_question_kind():
    env = SearchEnv()
    for task in env.sample_tasks(40, random.Random(1)):
        session = env.start(task)
        oracle_policy(session, task.payload["gold"])
        facts = session.episode(truncated=False).facts
        assert facts["success"], (task.prompt, facts)
        assert sorted(facts["retained"]) == sorted(facts["gold"])
        assert 2 <= len(facts["gold"]) <= 3


def test_a_reading_policy_solves_founder_questions_from_observations_alone():
    env = SearchEnv()
    for task in env.sample_tasks(20, random.Random(2)):
        if task.payload["kind"] != "founder_city":
            continue
        session = env.start(task)
        person = task.prompt.split()[-2]
        session.step(f"search {person}")
        text = session.step(f"read {person}").observation.split()
        company = text[text.index("founded") + 1]
        session.step(f"search {company}")
        junk = [d for d in session.context if d not in (person, company)]
        session.step("prune " + " ".join(junk))
        assert session.step("answer").done
        assert session.episode(truncated=False).facts["success"]


def test_a_single_search_exit_fails_and_is_visible_in_the_facts():
    env = SearchEnv()
    task = first_task(env)
    session = env.start(task)
    session.step("search founded company")
    session.step("answer")
    facts = session.episode(truncated=False).facts
    assert not facts["success"] and facts["num_searches"] == 1 and facts["answered"]


def test_search_facts_record_surfaced_and_gold():
    env = SearchEnv()
    task = first_task(env)
    person, company = task.payload["gold"]
    session = env.start(task)
    facts = session.step(f"search {company}").facts.facts
    assert facts["results"][0] == company and company in facts["surfaced"]
    assert facts["surfaced_gold"] == [
        d for d in facts["surfaced"] if d in (person, company)
    ]
    assert facts["retained"] == facts["surfaced"]
    # Searching again surfaces nothing new: the docs are already in the context.
    again = session.step(f"search {company}").facts.facts
    assert again["results"] == facts["results"] and again["surfaced"] == []


def test_the_oldest_docs_are_evicted_past_the_budget():
    env = SearchEnv({"top_k": 2, "context_budget": 3})
    session = env.start(first_task(env))
    first = session.step("search lamps")  # whichever company makes lamps
    assert len(first.facts.facts["retained"]) == 1
    second = session.step("search founded").facts.facts  # two people
    assert len(second["retained"]) == 3 and second["evicted"] == []
    third = session.step("search works")
    facts = third.facts.facts
    assert len(facts["retained"]) == 3
    assert facts["evicted"] == first.facts.facts["retained"] + second["surfaced"][:1]
    assert third.observation.split(" . evicted ")[1].split() == facts["evicted"]
    assert session.episode(truncated=False).facts["evicted_all"] == facts["evicted"]


def test_prune_removes_docs_and_reports_them():
    env = SearchEnv({"top_k": 3})
    session = env.start(first_task(env))
    results = session.step("search founded").facts.facts["results"]
    assert len(results) == 3
    pruned = session.step(f"prune {results[0]} {results[2]} {results[0]}")
    assert pruned.facts.ok and pruned.facts.facts["pruned"] == [results[0], results[2]]
    assert pruned.facts.facts["retained"] == [results[1]]
    assert pruned.observation == f"pruned {results[0]} {results[2]} . kept {results[1]}"
    again = session.step(f"prune {results[0]}")
    assert not again.facts.ok and again.facts.facts["error"] == "not_in_context"
    # A pruned doc was surfaced, so it can still be read.
    assert session.step(f"read {results[0]}").facts.ok
    session.step(f"prune {results[1]}")
    facts = session.episode(truncated=False).facts
    assert facts["prune_sizes"] == [2, 1] and facts["retained"] == []


def test_reading_needs_a_surfaced_doc():
    env = SearchEnv()
    task = first_task(env)
    session = env.start(task)
    person = task.payload["gold"][0]
    result = session.step(f"read {person}")
    assert not result.facts.ok and result.facts.facts["error"] == "not_surfaced"
    session.step(f"search {person}")
    result = session.step(f"read {person}")
    assert result.facts.ok and result.facts.facts["read_gold"]
    assert result.observation == env.docs[person].text


def test_fbeta_inputs_are_the_retained_and_gold_sets():
    env = SearchEnv({"top_k": 3})
    task = first_task(env)
    session = env.start(task)
    for doc in task.payload["gold"]:
        session.step(f"search {doc}")
    session.step("search likes chess")  # three more people, none of them gold
    session.step("answer")
    facts = session.episode(truncated=False).facts
    retained, gold = set(facts["retained"]), set(facts["gold"])
    assert gold <= retained and len(retained - gold) >= 3
    assert facts["success"]  # recall is what counts; precision is the reward's business
    assert set(facts["surfaced_all"]) >= retained


@pytest.mark.parametrize("action", MALFORMED)
def test_malformed_actions_never_raise(action):
    env = SearchEnv()
    session = env.start(first_task(env))
    result = session.step(action)
    assert not result.facts.ok and not result.done
    assert "error" in result.facts.facts and result.facts.facts["retained"] == []
    assert result.observation.startswith("error")
    assert set(result.observation.split()) <= set(env.vocabulary())


def test_steps_after_the_answer_are_errors_and_truncation_is_never_success():
    env = SearchEnv()
    task = first_task(env)
    session = env.start(task)
    oracle_policy(session, task.payload["gold"])
    result = session.step("search alba")
    assert result.done and not result.facts.ok and result.facts.facts["error"] == "over"
    assert session.episode(truncated=False).facts["success"]
    assert not session.episode(truncated=True).facts["success"]


@pytest.mark.parametrize(
    "params",
    [
        {"top_k": 0},
        {"top_k": -3},
        {"context_budget": 10**6},
        {"top_k": 5, "context_budget": 4},
        {"num_people": 5, "num_companies": 6},
        {"questions": []},
        {"questions": ["capital_of"]},
        {"index": "faiss"},
    ],
)
def test_params_reject_bad_values(params):
    with pytest.raises(ValidationError):
        SearchParams.model_validate(params)
