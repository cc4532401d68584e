"""Wiring: a validated config -> environment + reward function + monitor -> ``train``.

The one place (with the CLI that calls it) where the trainer meets ``rewards``; the
Django worker calls :func:`run_from_config` too, so both paths train identically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig
from trainer.distributed import Parallel
from trainer.envs.base import make_env
from trainer.events import Sink
from trainer.loop import TrainResult, train
from trainer.single import Single


def reward_config_for(config: TrainConfig):
    """The run's reward config, or the environment's default when none is given;
    with overlong shaping (the ``dapo`` preset) plus ``overlong_penalty`` sized to
    the generation budget (turns x tokens per action, at most the whole budget)."""
    from rewards import with_overlong_penalty
    from trainer.algorithms import resolve_algorithm
    from trainer.envs.base import default_reward_for

    rcfg = (
        config.reward
        if config.reward is not None
        else default_reward_for(config.env.name)
    )
    if resolve_algorithm(config.algorithm).overlong_shaping:
        rcfg = with_overlong_penalty(rcfg, generation_budget(config))
    return rcfg


def generation_budget(config: TrainConfig) -> int:
    """Tokens a rollout of ``config`` may generate: its turns (the rollout's, or the
    environment's own turn limit where that is smaller: ``dataset``'s ``max_turns``
    ends an episode first) times the tokens of an action, at most the whole budget
    (which counts the prompt and tool results too). DAPO's overlong penalty is sized
    to it (the ``dapo`` preset, the repair of length drift, the what-if)."""
    from rewards.repair_additions import generation_budget as budget

    r = config.rollout
    return budget(turn_limit(config), r.max_action_tokens, r.max_total_tokens)


def turn_limit(config: TrainConfig) -> int:
    """The turns an episode of ``config`` may take: the rollout's, or the
    environment's own limit where that is smaller."""
    turns = config.rollout.max_turns
    env_turns = getattr(config.env.params, "max_turns", None)
    if isinstance(env_turns, int) and 0 < env_turns < turns:
        return env_turns
    return turns


def run_from_config(
    config: TrainConfig,
    sink: Sink | None = None,
    *,
    should_stop: Callable[[], bool] | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: bool = True,
    endpoints: Mapping[str, Any] | None = None,
    init_checkpoint: str | Path | None = None,
    parallel: Parallel | Single | None = None,
    save_on_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Build and train; ``init_checkpoint``: the checkpoint directory that
    ``model.init_from_run`` names (the platform resolves the run id to it);
    ``parallel``: this process's rank when several train the run
    (``trainer.distributed``); None: this process trains alone; ``save_on_stop``:
    see :func:`trainer.loop.train`."""
    from rewards import build_monitor, build_reward_fn

    if config.model.init_from_run and init_checkpoint is None:
        raise ValueError(
            "model.init_from_run: a run id is resolved by the dashboard; here, "
            "pass the checkpoint directory (init_checkpoint)"
        )
    env = make_env(config.env.name, config.env.params, seed=config.seed)
    rcfg = reward_config_for(config)
    reward_fn = build_reward_fn(rcfg, env_name=config.env.name, endpoints=endpoints)
    monitor = build_monitor(rcfg, env_name=config.env.name)
    return train(
        config,
        env,
        reward_fn,
        sink,
        monitor=monitor,
        should_stop=should_stop,
        checkpoint_dir=checkpoint_dir,
        resume=resume,
        init_checkpoint=init_checkpoint,
        parallel=parallel,
        save_on_stop=save_on_stop,
    )
