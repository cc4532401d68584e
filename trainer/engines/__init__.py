"""Rollout engines behind one interface (:mod:`trainer.engines.base`); importing this
package registers the built-in ones: ``eager`` (the default: finished rows leave the
batch, no host sync per token) and ``compiled`` (a static cache and a
``torch.compile``d decode step on CUDA), ``continuous`` (the eager engine
plus whole episodes in one decode batch, each keeping its KV cache across its
turns) and ``reference`` (the plain KV-cache loop
the eager engine replaced, kept as the yardstick of exactness and speed)."""

from __future__ import annotations

from trainer.engines import (  # noqa: F401  (registration)
    compiled,
    continuous,
    eager,
    reference,
)
from trainer.engines.base import ENGINES, Generation, RolloutEngine, build_engine

__all__ = ["ENGINES", "Generation", "RolloutEngine", "build_engine"]
