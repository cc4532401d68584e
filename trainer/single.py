"""One process training a run alone: a world of size one.

:class:`Single` has the interface of :class:`trainer.distributed.Parallel` with every
collective an identity (a gather is a list of one, a broadcast returns its argument)
and every statistic over "the whole batch" the local one, computed as one process
always has (so its numbers are those of the trainer before it had several processes).
The trainer therefore holds a handle in every run and never asks whether it is
distributed; :func:`as_handle` turns "no handle given" into one at the boundary.

This module knows nothing of Django or of how processes are launched.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import torch
from torch import nn

from trainer.distributed import Parallel

if TYPE_CHECKING:
    from trainer.checkpoint import TrainState


@dataclass
class Single:
    """One process: the whole run. :class:`Parallel`'s interface with every
    collective an identity and every batch-wide statistic the local one (the numbers
    one process has always computed), so the trainer has no "if distributed" path."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    listening: bool = False  # the sink records trajectories: records are built
    rank: int = 0
    world: int = 1
    strategy: str = "single"
    _policy: nn.Module | None = None

    @property
    def main(self) -> bool:
        return True

    def share(self, n: int) -> int:
        return n

    def sample_seed(self, seed: int) -> int:
        return seed

    def my_tasks(self, env: Any, missing: int, rng: random.Random) -> list | None:
        """The tasks this process misses; None when it misses none (sampling is
        over: no task is drawn)."""
        return env.sample_tasks(missing, rng) if missing > 0 else None

    def group_offset(self, groups: int) -> int:
        return 0

    def wrap(self, policy: nn.Module) -> None:
        self._policy = policy

    def token_stats(self, *args: Any, **kwargs: Any) -> Any:
        if self._policy is None:
            raise RuntimeError("Single.wrap(policy) was not called")
        return self._policy.token_stats(*args, **kwargs)

    @contextmanager
    def accumulating(self, sync: bool) -> Iterator[None]:
        """Gradients of a micro-batch's backward add up in place: nothing to sync."""
        yield

    def minibatches(self, order: torch.Tensor, count: int) -> list[torch.Tensor]:
        """``order`` in parts of ceil(B / count) rows (the last one shorter)."""
        size = max(1, -(-order.numel() // count))
        return [order[i : i + size] for i in range(0, order.numel(), size)]

    def reduce_metrics(
        self, metrics: dict[str, float], weight: float
    ) -> dict[str, float]:
        return dict(metrics)

    def token_mean(self, x: torch.Tensor, mask: torch.Tensor) -> float:
        from trainer.algorithms import masked_mean

        return float(masked_mean(x, mask))

    def whiten(self, adv: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
        n = mask.sum().clamp(min=1)
        mean = (adv * mask).sum() / n
        var = (((adv - mean) * mask) ** 2).sum() / n
        return (adv - mean) / (var.sqrt() + eps) * mask

    def std_scaled(
        self,
        advantages: Callable[[str], torch.Tensor],
        rewards: list[float],
        scaling: str,
        eps: float,
    ) -> torch.Tensor:
        return advantages(scaling)  # this process's batch is the whole batch

    def save(
        self,
        root: str | Path,
        policy: nn.Module,
        optimizer: torch.optim.Optimizer,
        state: TrainState,
        *,
        meta: dict[str, Any],
        keep: int,
    ) -> Path:
        from trainer.checkpoint import save_checkpoint

        return save_checkpoint(
            root, policy=policy, optimizer=optimizer, state=state, meta=meta, keep=keep
        )

    def load(
        self, path: Path, policy: nn.Module, optimizer: torch.optim.Optimizer
    ) -> TrainState:
        """A one-file checkpoint; a sharded one only says how many processes it
        needs (the RNG streams are per rank)."""
        from trainer.checkpoint import load_checkpoint
        from trainer.dist_checkpoint import check_writers

        check_writers(path, self.world)
        return load_checkpoint(path, policy=policy, optimizer=optimizer)

    def any(self, flag: bool) -> bool:
        return flag

    def all_sum(self, values: Sequence[float]) -> list[float]:
        return [float(v) for v in values]

    def all_gather_ints(self, value: int) -> list[int]:
        return [int(value)]

    def all_gather_objects(self, obj: Any) -> list[Any]:
        return [obj]

    def gather(self, obj: Any) -> list[Any] | None:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        return obj

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


# What the trainer holds: this process's place in the run, alone or among several.
Handle = Union[Parallel, Single]  # noqa: UP007  (a runtime alias, not an annotation)


def as_handle(parallel: Parallel | Single | None) -> Parallel | Single:
    """The handle ``train`` runs with: none given, or a process group of one, is
    :class:`Single` (one process trains alone, whatever launched it)."""
    if parallel is None or parallel.world == 1:
        return Single()
    return parallel
