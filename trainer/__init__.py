"""The RL trainer: pure PyTorch + transformers; never imports Django, Channels or Celery.

from trainer import train, TrainConfig, NullSink, JsonlSink
train(config, env, reward_fn, sink)
"""

from __future__ import annotations

from trainer.config import TrainConfig
from trainer.events import JsonlSink, ListSink, NullSink


def __getattr__(name: str):
    # Imported lazily so `import trainer.config` stays light (the web process validates
    # configs without loading torch's training stack).
    if name in ("train", "TrainResult"):
        from trainer import loop

        return getattr(loop, name)
    if name == "run_from_config":
        from trainer.runner import run_from_config

        return run_from_config
    raise AttributeError(name)


__all__ = [
    "JsonlSink",
    "ListSink",
    "NullSink",
    "TrainConfig",
    "TrainResult",
    "run_from_config",
    "train",
]
