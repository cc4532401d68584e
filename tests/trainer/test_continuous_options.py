"""The continuous engine's options from the config, through the real loop:
``rollout.env_workers`` (environments stepped off the decode thread) and
``rollout.max_live_episodes`` (episodes in the decode batch at most). Neither changes
an episode: each samples from its own random stream (trainer.engines.continuous)."""

from __future__ import annotations

import threading

import pytest
from option_registry import covers
from pydantic import ValidationError

import trainer.engines.continuous as continuous
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

TASKS, GROUP = 2, 3


def _config(**rollout) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "model": {"size": "tiny", "device": "cpu"},
            "rollout": {
                "tasks_per_step": TASKS,
                "group_size": GROUP,
                "max_turns": 3,
                "engine": "continuous",
                **rollout,
            },
            "record": {"every": 1, "groups": None},
        }
    )


class _Seen:
    """What a run did: the threads its environment steps ran on and the most rows
    a decode batch held."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.rows: list[int] = []


def _train(cfg: TrainConfig, reward_fn, monkeypatch, thread_safe: bool = True):
    seen = _Seen()
    env = make_env("calc", seed=0)
    start = env.start

    class Watched:
        def __init__(self, session) -> None:
            self.session = session

        def step(self, action):
            seen.threads.append(threading.current_thread().name)
            return self.session.step(action)

        def __getattr__(self, name):
            return getattr(self.session, name)

    env.start = lambda task: Watched(start(task))
    env.steps_in_threads = thread_safe

    class Counted(continuous.SlotCache):
        def __init__(self, rows: int, *args, **kwargs) -> None:
            seen.rows.append(rows)
            super().__init__(rows, *args, **kwargs)

    monkeypatch.setattr(continuous, "SlotCache", Counted)
    sink = ListSink()
    train(cfg, env, reward_fn, sink)
    episodes = [
        [(s["kind"], tuple(s["token_ids"])) for s in ev["segments"]]
        for ev in sink.of_type("trajectory")
    ]
    assert len(episodes) == 2 * TASKS * GROUP
    return episodes, seen


@covers("rollout.env_workers")
def test_env_workers_step_the_environments_on_their_threads(reward_fn, monkeypatch):
    inline, seen_inline = _train(_config(), reward_fn, monkeypatch)
    assert seen_inline.threads
    assert set(seen_inline.threads) == {threading.current_thread().name}
    threaded, seen = _train(_config(env_workers=2), reward_fn, monkeypatch)
    assert seen.threads and all(n.startswith("env-step") for n in seen.threads)
    assert threaded == inline  # the same episodes, token for token
    # An environment not marked thread-safe keeps its steps on the decode thread.
    _, unsafe = _train(_config(env_workers=2), reward_fn, monkeypatch, False)
    assert set(unsafe.threads) == {threading.current_thread().name}


@covers("rollout.max_live_episodes")
def test_max_live_episodes_caps_the_decode_batch(reward_fn, monkeypatch):
    whole, seen_whole = _train(_config(), reward_fn, monkeypatch)
    assert set(seen_whole.rows) == {TASKS * GROUP}
    capped, seen = _train(_config(max_live_episodes=2), reward_fn, monkeypatch)
    assert set(seen.rows) == {2}
    assert capped == whole


@pytest.mark.parametrize("field", ["env_workers", "max_live_episodes"])
@pytest.mark.parametrize("engine", ["eager", "compiled", "reference"])
def test_the_options_are_refused_for_a_lock_step_engine(field, engine):
    with pytest.raises(ValidationError) as err:
        _config(engine=engine, **{field: 2})
    message = f"rollout.{field}: applies to rollout.engine: continuous only"
    assert message in str(err.value)
    _config(engine=engine, **{field: 0})  # the default is fine anywhere
