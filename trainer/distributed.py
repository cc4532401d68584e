"""Several processes training one run with ``torch.distributed``: who does what.

A run with ``resources.processes`` N > 1 is N processes (ranks), started by ``torchrun``
(``python -m trainer run --nproc-per-node N``); gloo on CPU, nccl on CUDA. Each rank:

* draws the step's tasks from a task stream seeded alike on every rank and keeps its
  contiguous share (:meth:`Parallel.my_tasks`), so the ranks' tasks partition the tasks
  one process would have drawn; a group (the G rollouts of one task) never spans ranks,
  so group advantages are exact. Tokens are sampled from a generator of the rank's own
  (rank 0's is the one-process run's);
* rescales its loss from its own normaliser to the whole batch's
  (:func:`trainer.accumulate.loss_scales`: trained tokens, sequences or rows summed
  over ranks),
  so the ranks' losses add up to the one-process loss; DDP (or FSDP2, with
  ``strategy: fsdp``, see :mod:`trainer.fsdp`) averages gradients over ranks, so each
  rank back-propagates N times its share and the averaged gradient is the
  one-process gradient;
* reduces its update metrics with the others (:meth:`Parallel.reduce_metrics`) and
  sends its rollouts and records to rank 0, which alone owns the sink: every trajectory
  reaches it once.

One process is a run of world size one: ``trainer.single.Single`` has the same
interface, so the trainer never asks whether it is distributed.

This module knows nothing of Django or of how processes are launched.
"""

from __future__ import annotations

import gc
import inspect
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:
    from pathlib import Path

    from trainer.checkpoint import TrainState

# Update metrics that are one rank's share of a whole-batch loss: their sum is the
# batch's value. Identical on every rank (taken as they are): the gradient norm after
# the all-reduce, and the KL coefficient.
_SUMMED = frozenset({"loss", "policy_loss", "kl", "value_loss"})
_SAME = frozenset({"grad_norm", "kl/coef"})


class _Scorer(nn.Module):
    """``Policy.token_stats`` as a module's forward, so that the update's forward goes
    through DDP (which syncs gradients only for a forward it saw)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.policy.token_stats(*args, **kwargs)


@dataclass
class Parallel:
    """This process's place in the run and the collectives the trainer uses."""

    rank: int
    world: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    strategy: str = "ddp"
    listening: bool = False  # rank 0's sink records trajectories: all build them
    _scorer: nn.Module | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0

    # ----- the split -------------------------------------------------------------
    def share(self, n: int) -> int:
        """This rank's part of ``n`` items split as evenly as possible."""
        return n // self.world + (1 if self.rank < n % self.world else 0)

    def sample_seed(self, seed: int) -> int:
        """The token-sampling seed of this rank: the run's own on rank 0 (what one
        process uses), a distinct stream on every other rank."""
        if self.rank == 0:
            return seed
        return random.Random(f"{seed}/rank/{self.rank}").getrandbits(63)

    def my_tasks(self, env: Any, missing: int, rng: random.Random) -> list | None:
        """Every rank draws the tasks all ranks miss from the same stream and keeps
        its contiguous slice; None when no rank misses any (sampling is over)."""
        counts = self.all_gather_ints(missing)
        total = sum(counts)
        if total == 0:
            return None
        drawn = env.sample_tasks(total, rng)
        lo = sum(counts[: self.rank])
        return drawn[lo : lo + counts[self.rank]]

    def group_offset(self, groups: int) -> int:
        """Where this rank's groups start in the step's global numbering."""
        return sum(self.all_gather_ints(groups)[: self.rank])

    # ----- the update ------------------------------------------------------------
    def wrap(self, policy: nn.Module) -> None:
        """Put the policy's scoring forward under DDP (after any weights are loaded:
        DDP starts every rank from rank 0's parameters). fsdp: the policy was
        sharded before its optimizer was built (``trainer.fsdp.shard``); its shards
        gather in the plain forward."""
        if self.strategy == "fsdp":
            self._scorer = _Scorer(policy)
            return
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        # The rotary tables are buffers computed alike everywhere: no broadcast before
        # every forward (the keyword's name changed in torch 2.13).
        quiet = (
            {"forward_sync_buffers": False}
            if "forward_sync_buffers" in inspect.signature(DDP).parameters
            else {"broadcast_buffers": False}
        )
        self._scorer = DDP(_Scorer(policy), device_ids=ids, **quiet)

    def token_stats(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs: Any
    ) -> Any:
        """The policy's ``token_stats`` through the wrapper. fsdp: a forward is a
        collective, so every rank reads shared prompts once (two forwards) only if
        every rank can (``shares_prefix``), else every rank reads its rows whole."""
        if self._scorer is None:
            raise RuntimeError("Parallel.wrap(policy) was not called")
        prefixes = kwargs.get("prefixes")
        if self.strategy == "fsdp" and prefixes is not None:
            from trainer.rows import shares_prefix

            if self.any(not shares_prefix(attention_mask, prefixes)):
                kwargs["prefixes"] = None
        return self._scorer(input_ids, attention_mask, **kwargs)

    @contextmanager
    def accumulating(self, sync: bool) -> Iterator[None]:
        """A micro-batch's backward: gradients synchronised across ranks only
        when ``sync`` (the minibatch's last), else kept on the rank, added to."""
        if sync:
            yield
        elif self.strategy == "fsdp":
            from trainer.fsdp import gradient_sync

            with gradient_sync(self._scorer.policy, False):
                yield
        else:
            with self._scorer.no_sync():
                yield

    def reduce_metrics(
        self, metrics: dict[str, float], weight: float
    ) -> dict[str, float]:
        """Every rank's update metrics -> the whole batch's: shares of a loss summed,
        maxima and minima as such, the rest averaged weighted by ``weight`` (the
        rank's trained tokens, which the metrics are means over)."""
        return combine_metrics(self.all_gather_objects((metrics, float(weight))))

    def minibatches(self, order: torch.Tensor, count: int) -> list[torch.Tensor]:
        """This rank's rows cut into exactly ``count`` parts (some maybe empty): the
        ranks' k-th parts make the k-th global minibatch, and every rank takes part
        in every gradient all-reduce."""
        return list(torch.tensor_split(order, count))

    # ----- statistics over the whole batch -----------------------------------------
    def token_mean(self, x: torch.Tensor, mask: torch.Tensor) -> float:
        """The mean of ``x`` (B, T-1) over every rank's trained tokens."""
        keep = mask > 0
        total, count = self.all_sum([float(x[keep].sum()), float(keep.sum())])
        return total / max(count, 1.0)

    def whiten(self, adv: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
        """``adv`` (B, T-1) whitened over every rank's trained tokens."""
        s, ss, k = self.all_sum(
            [
                float((adv * mask).sum()),
                float(((adv * mask) ** 2).sum()),
                float(mask.sum()),
            ]
        )
        mean = s / max(k, 1.0)
        var = max(ss / max(k, 1.0) - mean**2, 0.0)
        return (adv - mean) / (math.sqrt(var) + eps) * mask

    def std_scaled(
        self,
        advantages: Callable[[str], torch.Tensor],
        rewards: list[float],
        scaling: str,
        eps: float,
    ) -> torch.Tensor:
        """``advantages(scaling)`` computed on this rank's rows, except that the
        ``"batch"`` std is that of every rank's ``rewards``: unscaled advantages
        divided by it (both are linear in 1/std)."""
        if scaling != "batch":
            return advantages(scaling)
        return advantages("none") / (self.batch_std(rewards) + eps)

    def batch_std(self, xs: list[float]) -> float:
        """The unbiased std of every rank's ``xs`` together (0 for fewer than two)."""
        n, s, ss = self.all_sum(
            [float(len(xs)), math.fsum(xs), math.fsum(x * x for x in xs)]
        )
        if n < 2:
            return 0.0
        return math.sqrt(max(ss - s * s / n, 0.0) / (n - 1))

    # ----- checkpoints -------------------------------------------------------------
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
        """Every rank writes its part (``torch.distributed.checkpoint``)."""
        from trainer.dist_checkpoint import save_sharded

        return save_sharded(
            root,
            policy=policy,
            optimizer=optimizer,
            state=state,
            meta=meta,
            keep=keep,
            par=self,
        )

    def load(
        self, path: Path, policy: nn.Module, optimizer: torch.optim.Optimizer
    ) -> TrainState:
        from trainer.dist_checkpoint import load_sharded

        return load_sharded(path, policy=policy, optimizer=optimizer, par=self)

    # ----- collectives -----------------------------------------------------------
    def all_sum(self, values: Sequence[float]) -> list[float]:
        t = torch.tensor(list(values), dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def any(self, flag: bool) -> bool:
        return self.all_sum([1.0 if flag else 0.0])[0] > 0

    def all_gather_ints(self, value: int) -> list[int]:
        t = torch.tensor([value], dtype=torch.long, device=self.device)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        dist.all_gather(out, t)
        return [int(x) for x in out]

    def all_gather_objects(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0, in rank order; None elsewhere."""
        out: list[Any] | None = [None] * self.world if self.main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        """Free the DDP wrapper, then the process group. In that order: DDP's
        reducer holds the group, and a reducer that drops the group's last
        reference destroys it with the interpreter lock held, joining gloo's
        worker threads while one of them waits for that lock to free a tensor a
        collective used (PyTorch #56297): the rank hangs at its end. Freed first,
        the reducer leaves the group to ``destroy_process_group``, which
        releases the lock while the workers finish."""
        self._scorer = None
        gc.collect()  # the wrapper sits in reference cycles (hooks, modules)
        if dist.is_initialized():
            dist.destroy_process_group()


def combine_metrics(
    parts: Sequence[tuple[Mapping[str, float], float | Mapping[str, float]]],
) -> dict[str, float]:
    """Update metrics of parts of a batch (ranks' shares, micro-batches), each with
    its weight: the tokens its metrics are means over (one number, or by name
    prefix with ``""`` for the rest) -> the whole batch's: shares of a loss summed,
    maxima and minima as such (over parts with a weight, if any has one), the rest
    averaged by weight. One part's are its own, as they are."""
    if len(parts) == 1:
        return dict(parts[0][0])
    names = list(dict.fromkeys(k for m, _ in parts for k in m))
    return {
        name: _reduce(
            name, [(m[name], _weight(w, name)) for m, w in parts if name in m]
        )
        for name in names
    }


def _weight(weights: float | Mapping[str, float], name: str) -> float:
    if not isinstance(weights, Mapping):
        return float(weights)
    prefix = max((p for p in weights if name.startswith(p)), key=len)
    return float(weights[prefix])


def _reduce(name: str, vals: list[tuple[float, float]]) -> float:
    xs = [v for v, _ in vals]
    if name in _SUMMED:
        return float(math.fsum(xs))
    if name in _SAME:
        return float(xs[0])
    weighted = [(v, w) for v, w in vals if w > 0]
    if name.endswith(("/max", "_max")):
        return float(max(v for v, _ in weighted or vals))
    if name.endswith(("/min", "_min")):
        return float(min(v for v, _ in weighted or vals))
    if not weighted:  # no part trained a token: the plain mean (NaN stays NaN)
        return float(sum(xs) / len(xs))
    total = math.fsum(w for _, w in weighted)
    return float(math.fsum(v * w for v, w in weighted) / total)


def start(
    device: str = "auto",
    strategy: str = "ddp",
    *,
    init_method: str | None = None,
    rank: int | None = None,
    world: int | None = None,
    timeout_s: float = 1800.0,
) -> Parallel:
    """Join the run's process group: gloo on CPU, nccl on CUDA. Without
    ``init_method`` the rank, world size and rendezvous come from ``torchrun``
    (``env://``); a test passes ``tcp://HOST:PORT``, ``rank`` and ``world``."""
    cuda = torch.cuda.is_available() and device != "cpu"
    backend = "nccl" if cuda else "gloo"
    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
    if init_method is not None:
        kwargs.update(init_method=init_method, rank=rank, world_size=world)
    dist.init_process_group(backend, **kwargs)
    r, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cpu")
    if cuda:
        local = dist.get_node_local_rank(fallback_rank=r)
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    return Parallel(rank=r, world=n, device=dev, strategy=strategy)


def merge_sampled(parts: list[Any]) -> Any:
    """The ranks' ``Sampled`` as one step's (rank order is global group order); the
    wall-clock times are the slowest rank's."""
    from trainer.sampled import Sampled

    out = Sampled([], [], [], 0)
    for p in parts:
        out.rollouts += p.rollouts
        out.results += p.results
        out.kept += p.kept
        out.row_entropy += p.row_entropy
        out.groups_dropped += p.groups_dropped
        out.gen_s = max(out.gen_s, p.gen_s)
        out.reward_s = max(out.reward_s, p.reward_s)
    return out
