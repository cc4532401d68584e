"""What every environment promises the trainer, checked the same way for each one:
random well-formed play succeeds and stays inside the tokenizer's vocabulary with JSON
facts; any word salad an untrained policy can write is a failed tool call, never an
exception or an out-of-vocabulary observation."""

from __future__ import annotations

import json
import random

import pytest

from trainer.envs.calc import CalcEnv
from trainer.envs.search import SearchEnv
from trainer.envs.swarm import SwarmEnv

# name: (environment for random play, turns per episode, vocabulary size cap,
#        longest action in words or None)
RANDOM_PLAY = {
    "calc": (lambda: CalcEnv({"max_operand": 12}), 6, 100, None),
    "search": (lambda: SearchEnv(seed=1), 8, 200, 8),
    "swarm": (
        lambda: SwarmEnv(
            {"max_subtasks": 12, "subagent_max_steps": 20, "max_cost": 15}
        ),
        8,
        100,
        None,
    ),
}
SALAD = {
    "calc": lambda: CalcEnv(seed=2),
    "search": lambda: SearchEnv(seed=2),
    "swarm": lambda: SwarmEnv(seed=2),
}


@pytest.mark.parametrize("name", sorted(RANDOM_PLAY))
def test_random_episodes_stay_inside_the_vocabulary_and_are_json(name):
    make, turns, vocab_cap, max_words = RANDOM_PLAY[name]
    env = make()
    vocab = set(env.vocabulary())
    rng = random.Random(0)
    for task in env.sample_tasks(200, rng):
        assert set(task.prompt.split()) <= vocab, task.prompt
        session = env.start(task)
        for _ in range(turns):
            action = session.random_action(rng)
            result = session.step(action)
            assert result.facts.ok, action
            assert set(action.split()) | set(result.observation.split()) <= vocab
            if max_words is not None:
                assert len(action.split()) <= max_words
            if result.done:
                break
        episode = session.episode(truncated=not result.done)
        json.dumps(dict(episode.facts))
        json.dumps([dict(s.facts) for s in episode.steps])
    assert len(vocab) < vocab_cap


@pytest.mark.parametrize("name", sorted(SALAD))
def test_word_salad_never_raises_and_stays_inside_the_vocabulary(name):
    env = SALAD[name]()
    vocab = env.vocabulary()
    rng = random.Random(5)
    for task in env.sample_tasks(100, rng):
        session = env.start(task)
        for _ in range(10):
            words = rng.choices(vocab + ["\u00e9", "12", "-1", ""], k=rng.randint(0, 7))
            if rng.random() < 0.7:  # mostly a real tool name: exercise the parsers
                words.insert(0, session.random_action(rng).split()[0])
            result = session.step(" ".join(words))
            assert set(result.observation.split()) <= set(vocab)
            json.dumps(dict(result.facts.facts))
