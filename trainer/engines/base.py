"""The rollout-engine interface: what the rollout asks of whatever samples tokens.

An engine turns token contexts into sampled continuations with the sampler's
log-probs. The built-in ones (:mod:`trainer.engines.eager`, and the reference loop
kept for tests and benches) run the policy's own module in this process; an
external server (vLLM, SGLang) fits the same calls: ``generate`` with log-probs,
``load_weights`` after every optimiser step, ``sleep``/``wake`` around the update
so that the learner and the sampler can share one device. Engines are registered
by name in :data:`ENGINES` (``rollout.engine`` in the config); a plugin registers
its own with ``@ENGINES.register("name")``.

This module knows tensors and the policy's attributes; nothing of environments,
rewards or algorithms.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rewards.registry import Registry

if TYPE_CHECKING:
    from trainer.policy import Policy


@dataclass(frozen=True)
class Generation:
    """One continuation per context: ``tokens[b]`` ends with a stop token (kept) or
    at row b's budget; ``logprobs[b][k]`` is the sampler's log-prob of
    ``tokens[b][k]`` at the policy's temperature (empty lists unless asked for)."""

    tokens: list[list[int]]
    logprobs: list[list[float]]


class RolloutEngine(ABC):
    """Samples from ``policy``. Subclasses registered in :data:`ENGINES` are built
    with the policy alone (``Engine(policy)``), once per run."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.weights_version = 0  # optimiser steps whose weights were loaded
        self.asleep = False

    @abstractmethod
    def generate(
        self,
        contexts: list[list[int]],
        budgets: list[int],
        *,
        temperature: float,
        top_p: float,
        generator: torch.Generator | None,
        with_logprobs: bool,
    ) -> Generation:
        """Continue every context until a stop token of the policy
        (``policy.stop_ids``) or its budget; sample from
        ``softmax(logits / temperature)``, nucleus-filtered at ``top_p``, drawing
        from ``generator`` (temperature 0: greedy). Raises
        :class:`~trainer.stopping.Stopped` when ``policy.stop_check`` says so."""

    def load_weights(self) -> None:
        """Called after every optimiser step: sample from the policy's new weights
        from now on. An in-process engine shares the module and has nothing to do;
        an external one copies the weights (or LoRA adapters) over."""
        self.weights_version += 1

    def sleep(self) -> None:
        """Free what the engine holds on the device between rollouts (its KV
        cache), so that the update has the memory; :meth:`wake` before sampling.
        In process there is nothing to free: the caches are gone when ``generate``
        returns."""
        self.asleep = True

    def wake(self) -> None:
        """Take back what :meth:`sleep` freed."""
        self.asleep = False


ENGINES: Registry[type[RolloutEngine]] = Registry("rollout engine")


def build_engine(name: str, policy: Policy) -> RolloutEngine:
    """The engine registered as ``name``, sampling from ``policy``."""
    import trainer.engines  # noqa: F401  (registers the built-in engines)

    return ENGINES.get(name)(policy)
