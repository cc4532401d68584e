"""Built-in environments; importing this package registers them in ``ENVIRONMENTS``."""

from __future__ import annotations

from trainer.envs import calc, dataset, search, swarm  # noqa: F401  (registration side effects)
from trainer.envs.base import ENVIRONMENTS, Environment, EnvSession, Task, make_env

__all__ = ["ENVIRONMENTS", "EnvSession", "Environment", "Task", "make_env"]
