"""Continuous batching across turns: episodes, not turns, share the decode batch.

The lock-step rollout (:func:`trainer.rollout.play` with the other engines) plays a
turn of every active episode in one ``generate`` call, waits for its slowest row,
steps every environment, and re-reads every whole context at the next turn. Here
an episode lives in the batch from its first action to its end:

* **Rows rejoin as soon as their tool call returns.** When an episode's action
  ends (a stop token or its budget) its row leaves the decode batch and its
  environment step runs off the decode thread; when the observation comes back the
  episode rejoins at the next decode step while the others keep generating. New
  episodes fill free slots (``slots``) the same way.
* **Each episode keeps its KV cache across its turns.** A row that leaves takes
  its keys and values with it; when it rejoins, only its last action token and the
  observation go through the model on top of them (no re-prefill of the context).

**Random streams.** Each episode samples from its own generator, seeded by one
draw per episode from the run's generator, in episode order
(:func:`episode_generators`), and takes exactly one Exp(1) noise vector from it per
sampled token (``argmax(p / q)``, what ``torch.multinomial`` computes). An
episode's tokens are therefore a function of its own context and seed alone: they
do not depend on which episodes share the batch, on the slot count, or on when
the environment's threads answer, and they are the tokens a sequential sampler
(one episode at a time, the eager engine drawing from that generator) gives. They
differ from the lock-step loop's, which draws the whole batch's noise from one
generator per step; per episode, both are exact samples of the same policy, so the
two are equal in distribution (and equal token for token at temperature 0).

**Threads.** Only the work :meth:`EpisodeDriver.act` returns (the environment
step) runs on the worker threads (``workers``), one call per episode at a time;
recording, tokenizing and the model stay on the decode thread. ``workers=0`` (the
default) runs that work inline.

This module knows tensors and the driver's three calls; nothing of environments.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from trainer.engines.base import ENGINES
from trainer.engines.eager import EagerEngine
from trainer.engines.prefill import prefill
from trainer.engines.reference import sampling_probs, token_logprobs
from trainer.stopping import Stopped

# What an episode feeds next and how many tokens its next action may take.
Turn = tuple[list[int], int]


class EpisodeDriver(Protocol):
    """The rollout's side of continuous batching, called on the decode thread."""

    def begin(self, e: int) -> Turn | None:
        """Episode e's context and first budget; None: it cannot act at all."""

    def act(
        self, e: int, tokens: list[int], logprobs: list[float]
    ) -> Callable[[], Any]:
        """Episode e's action is sampled: record it, and return the work to run off
        the decode thread (the environment's step); its result goes to ``resume``."""

    def resume(self, e: int, outcome: Any) -> Turn | None:
        """The tokens to append after e's action (the observation) and its next
        budget; None: the episode is over."""


def episode_generators(generator: torch.Generator | None, n: int) -> list:
    """One generator per episode, seeded by one draw each from the run's
    ``generator`` in episode order (None: the global generator's draws)."""
    seeds = torch.randint(0, 2**62, (n,), generator=generator).tolist()
    return [torch.Generator().manual_seed(s) for s in seeds]


@dataclass
class _Held:
    """An episode out of the batch: its KV rows (trimmed of left padding), their
    mask, the position of the next token fed, the tokens to feed, its budget."""

    kv: list[tuple[torch.Tensor, torch.Tensor]] | None
    mask: torch.Tensor | None  # (1, L)
    pos: int
    pending: list[int]
    budget: int


@dataclass
class _Batch:
    """The decode batch: row k is episode ``rows[k]``."""

    rows: list[int]
    cache: DynamicCache
    mask: torch.Tensor  # (n, L)
    pos: torch.Tensor  # (n, 1): position of the token fed next
    logits: torch.Tensor  # (n, V)


@ENGINES.register("continuous")
class ContinuousEngine(EagerEngine):
    """The eager engine plus :meth:`run_episodes`: the rollout hands it whole
    episodes (``rollout.engine: continuous``). ``generate`` (evaluation, what-ifs)
    is the eager engine's."""

    continuous = True
    # Threads stepping environments (0: on the decode thread). 0 by default: the
    # built-in environments step in microseconds, and on a 2-core CPU the pool
    # made the swarm shape slower (bench/rollout_bench.py); an environment whose
    # tool calls wait (a sandbox, a network call) wants a few.
    workers = 0
    slots: int | None = None  # episodes in the decode batch at most (None: all)

    @torch.no_grad()
    def run_episodes(
        self,
        driver: EpisodeDriver,
        generators: list,
        *,
        temperature: float,
        top_p: float,
        slots: int | None = None,
        workers: int | None = None,
    ) -> None:
        """Play episodes 0..len(generators)-1 to their ends, at most ``slots`` in
        the decode batch at once (None: the engine's ``slots``)."""
        workers = self.workers if workers is None else workers
        slots = self.slots if slots is None else slots
        run = _Run(self.policy, driver, generators, temperature, top_p, slots)
        if workers <= 0:
            run.loop(None)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="env-step") as pool:
            run.loop(pool)


class _Run:
    def __init__(self, policy, driver, generators, temperature, top_p, slots):
        self.policy, self.driver, self.gens = policy, driver, generators
        self.temperature, self.top_p = temperature, top_p
        self.slots = len(generators) if slots is None else max(1, int(slots))
        self.waiting: list[int] = []  # ready to join, in order
        self.held: dict[int, _Held] = {}
        self.produced: dict[int, tuple[list[int], list[float]]] = {}
        self.returns: queue.Queue[tuple[int, Future]] = queue.Queue()
        self.away = 0  # episodes whose environment step is running
        self.next_new = 0
        self.batch: _Batch | None = None
        self.stop = set(policy.stop_ids)

    def loop(self, pool: ThreadPoolExecutor | None) -> None:
        self.pool = pool
        n = len(self.gens)
        while True:
            self._collect(block=False)
            while self.next_new < n and self._occupied() < self.slots:
                self._begin(self.next_new)
                self.next_new += 1
            if self.batch is None and not self.waiting:
                if not self.away:  # every episode has begun and ended
                    return
                self._collect(block=True)  # nothing to decode until one returns
                continue
            self._admit()
            check = self.policy.stop_check
            if check is not None and check():
                raise Stopped("asked to stop during generation")
            self._step()

    def _occupied(self) -> int:
        rows = len(self.batch.rows) if self.batch is not None else 0
        return rows + self.away + len(self.waiting)

    def _begin(self, e: int) -> None:
        turn = self.driver.begin(e)
        if turn is not None:
            self.held[e] = _Held(None, None, 0, list(turn[0]), turn[1])
            self.waiting.append(e)

    def _collect(self, block: bool) -> None:
        """Episodes whose environment step has returned: rejoin or end."""
        while self.away:
            try:
                e, fut = self.returns.get(block=block)
            except queue.Empty:
                return
            block = False
            self.away -= 1
            turn = self.driver.resume(e, fut.result())
            if turn is None:
                self.held.pop(e)
                continue
            held = self.held[e]
            held.pending.extend(turn[0])
            held.budget = turn[1]
            self.waiting.append(e)

    def _admit(self) -> None:
        """The waiting episodes join the batch: new ones prefilled, returning ones
        extended by their pending tokens on top of their own KV cache."""
        if not self.waiting:
            return
        new = [e for e in self.waiting if self.held[e].kv is None]
        back = [e for e in self.waiting if self.held[e].kv is not None]
        self.waiting = []
        for part in (self._prefill(new), self._extend(back)):
            if part is not None:
                self.batch = part if self.batch is None else _concat(self.batch, part)
        for e in new + back:
            self.produced[e] = ([], [])

    def _prefill(self, eps: list[int]) -> _Batch | None:
        if not eps:
            return None
        contexts = [self.held[e].pending for e in eps]
        out, logits, mask, positions = prefill(self.policy, contexts)
        return _Batch(eps, out.cache, mask, positions[:, -1:] + 1, logits)

    def _extend(self, eps: list[int]) -> _Batch | None:
        if not eps:
            return None
        from trainer.policy import left_pad

        dev = self.policy.device
        helds = [self.held[e] for e in eps]
        width = max(h.mask.shape[1] for h in helds)
        cache = DynamicCache()
        for i in range(len(helds[0].kv)):
            keys = torch.cat([_lpad(h.kv[i][0], width) for h in helds])
            values = torch.cat([_lpad(h.kv[i][1], width) for h in helds])
            cache.update(keys, values, i)
        old_mask = torch.cat([_lpad(h.mask, width) for h in helds])
        ids, new_mask = left_pad([h.pending for h in helds], self.policy.pad_id, dev)
        start = torch.tensor([[h.pos] for h in helds], device=dev)
        positions = start + (new_mask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([old_mask, new_mask], dim=1)
        out = self.policy.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        pos = positions[:, -1:] + 1
        return _Batch(eps, out.cache, mask, pos, out.logits[:, -1, :])

    def _step(self) -> None:
        """Sample one token of every row; finished rows leave, the rest go on."""
        b = self.batch
        tok, lp = self._sample(b)
        toks, lps = tok.tolist(), lp.tolist()
        keep: list[int] = []
        for k, e in enumerate(b.rows):
            tokens, logprobs = self.produced[e]
            tokens.append(toks[k])
            logprobs.append(lps[k])
            if toks[k] in self.stop or len(tokens) >= self.held[e].budget:
                self._leave(k, e)
            else:
                keep.append(k)
        if len(keep) < len(b.rows):
            if not keep:
                self.batch = None
                return
            _select(b, keep)
            tok = tok[keep]
        b.mask = torch.cat([b.mask, torch.ones_like(b.mask[:, :1])], dim=1)
        out = self.policy.model(
            input_ids=tok.unsqueeze(1),
            attention_mask=b.mask,
            position_ids=b.pos,
            cache=b.cache,
            use_cache=True,
        )
        b.cache, b.logits, b.pos = out.cache, out.logits[:, -1, :], b.pos + 1

    def _sample(self, b: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """argmax(p / q), q one Exp(1) vector per row from its episode's generator
        (what a batch of one draws from it; temperature 0: the most likely token);
        and its log-prob at the policy's temperature."""
        logits = b.logits
        if self.temperature <= 0:
            tok = logits.argmax(-1)
        else:
            probs = sampling_probs(logits, self.temperature, self.top_p)
            V = probs.shape[-1]
            noise = torch.empty((len(b.rows), V), dtype=torch.float32)
            for k, e in enumerate(b.rows):
                noise[k].exponential_(1, generator=self.gens[e])
            tok = (probs / noise.to(probs.device)).argmax(-1)
        return tok, token_logprobs(logits, tok, self.policy.temperature)

    def _leave(self, k: int, e: int) -> None:
        """Row k's action is over: keep its KV rows, hand the action to the driver
        and its work to a thread."""
        b = self.batch
        row = b.mask[k]
        first = int(row.nonzero()[0])
        held = self.held[e]
        held.kv = [
            (layer.keys[k : k + 1, :, first:], layer.values[k : k + 1, :, first:])
            for layer in b.cache.layers
        ]
        held.mask = row[first:].unsqueeze(0)
        held.pos = int(b.pos[k])
        tokens, logprobs = self.produced.pop(e)
        held.pending = [tokens[-1]]  # sampled, not yet fed
        work = self.driver.act(e, tokens, logprobs)
        self.away += 1
        if self.pool is None:
            fut: Future = Future()
            fut.set_result(work())
            self.returns.put((e, fut))
        else:
            fut = self.pool.submit(work)
            fut.add_done_callback(lambda f, e=e: self.returns.put((e, f)))


def _lpad(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zeros on the left of the sequence axis (-2 for K/V, -1 for a mask) up to
    ``width``."""
    axis = -2 if x.dim() == 4 else -1
    extra = width - x.shape[axis]
    if extra <= 0:
        return x
    shape = list(x.shape)
    shape[axis] = extra
    return torch.cat([x.new_zeros(shape), x], dim=axis)


def _concat(a: _Batch, b: _Batch) -> _Batch:
    """Two batches as one, the narrower left-padded (masked) to the wider."""
    width = max(a.mask.shape[1], b.mask.shape[1])
    for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
        la.keys = torch.cat([_lpad(la.keys, width), _lpad(lb.keys, width)])
        la.values = torch.cat([_lpad(la.values, width), _lpad(lb.values, width)])
    return _Batch(
        a.rows + b.rows,
        a.cache,
        torch.cat([_lpad(a.mask, width), _lpad(b.mask, width)]),
        torch.cat([a.pos, b.pos]),
        torch.cat([a.logits, b.logits]),
    )


def _select(b: _Batch, keep: list[int]) -> None:
    """Keep rows ``keep``; drop the columns left of every kept row's first token."""
    idx = torch.tensor(keep, device=b.mask.device)
    b.cache.batch_select_indices(idx)
    b.rows = [b.rows[k] for k in keep]
    b.mask, b.pos, b.logits = b.mask[idx], b.pos[idx], b.logits[idx]
    first = int(b.mask.any(0).nonzero()[0])
    if first:
        for layer in b.cache.layers:
            layer.keys = layer.keys[:, :, first:]
            layer.values = layer.values[:, :, first:]
        b.mask = b.mask[:, first:]
