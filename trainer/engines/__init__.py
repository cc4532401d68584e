"""Rollout engines behind one interface (:mod:`trainer.engines.base`); importing this
package registers the built-in ones: ``eager`` (the default: finished rows leave the
batch, no host sync per token) and ``reference`` (the plain KV-cache loop it
replaced, kept as the yardstick of exactness and speed)."""

from __future__ import annotations

from trainer.engines import eager, reference  # noqa: F401  (registration)
from trainer.engines.base import ENGINES, Generation, RolloutEngine, build_engine

__all__ = ["ENGINES", "Generation", "RolloutEngine", "build_engine"]
