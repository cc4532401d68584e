"""A stop is observed inside generation, not only between steps (issue 21.4)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.policy import Policy
from trainer.stopping import Every, Stopped


def test_generation_stops_at_the_token_its_stop_check_says_so():
    env = make_env("calc", seed=0)
    policy = Policy.build(TrainConfig().model, env.vocabulary())
    policy.stop_ids = (-1,)  # nothing ends an action: 4096 tokens a row
    asked = []

    def stop_check() -> bool:
        asked.append(1)
        return len(asked) > 10

    policy.stop_check = stop_check
    with pytest.raises(Stopped):
        policy.generate(
            [[policy.bos_id]] * 8,
            max_new_tokens=4096,
            generator=torch.Generator().manual_seed(0),
        )
    assert len(asked) == 11  # asked once a token, stopped at the 11th


def test_every_passes_the_question_on_at_most_once_a_period(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("trainer.stopping.time.monotonic", lambda: clock[0])
    answers = iter([False, False, True])
    asked = []

    def should_stop() -> bool:
        asked.append(clock[0])
        return next(answers)

    every = Every(should_stop, seconds=0.5)
    assert [every(), every()] == [False, False]  # the second is not passed on
    clock[0] += 0.5
    assert every() is False
    clock[0] += 0.5
    assert every() is True and every() is True
    assert asked == [100.0, 100.5, 101.0]


def test_a_stop_during_the_first_steps_generation_cancels_before_any_step(reward_fn):
    cfg = TrainConfig.model_validate(
        {
            "steps": 3,
            "env": {"name": "calc"},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        }
    )
    calls = []

    def should_stop() -> bool:
        # False before step 1; True from the first question inside its generation.
        calls.append(1)
        return len(calls) > 1

    sink = ListSink()
    result = train(
        cfg, make_env("calc", seed=0), reward_fn, sink, should_stop=should_stop
    )
    assert (result.status, result.last_step) == ("cancelled", 0)
    assert sink.of_type("step") == []  # step 1 was dropped, not finished
    assert sink.events[-1] == {
        "type": "run_finished",
        "status": "cancelled",
        "step": 0,
        "error": None,
    }
