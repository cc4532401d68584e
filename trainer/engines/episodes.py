"""The scheduling half of continuous batching: which episodes decode, which wait.

An episode begins when a slot is free, decodes until its action ends (a stop
token or its budget), hands the action to the driver, whose work (the
environment's step) runs off the decode thread, and rejoins with the observation
when that work returns, until the driver says it is over. How the decode batch
keeps its keys and values is the subclass's (:mod:`trainer.engines.continuous`:
in place, one row per slot; :mod:`trainer.engines.continuous_batch`: a batch
re-formed as rows leave and join, for models the slot rows do not fit).

**Random streams.** Each episode samples from its own generator and takes exactly
one Exp(1) noise vector from it per sampled token (``argmax(p / q)``, what
``torch.multinomial`` computes), so its tokens depend on its own context and seed
alone (see :mod:`trainer.engines.continuous`); on a GPU the generators live on the
device (:func:`on_device`).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import torch

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


def on_device(generators: list, device: torch.device | str) -> list:
    """The episodes' generators re-made on ``device`` (not the CPU), each seeded
    with its host generator's seed, so that its noise is drawn where the logits
    are: a host generator costs a rows x vocabulary block of Exp(1) draws on the
    CPU and its copy to the device every token (151k x 128 rows: 77 MB). Each
    episode keeps a stream of its own (its tokens still depend on its context
    and seed alone), but the device's generator (Philox on CUDA) draws other
    numbers than the host's, so they are not the eager engine's tokens. The
    generators must be fresh (as :func:`episode_generators` makes them): a
    generator's seed, not its state, is what carries over."""
    device = torch.device(device)
    if device.type == "cpu":
        return list(generators)
    return [
        torch.Generator(device=device).manual_seed(g.initial_seed()) for g in generators
    ]


class Scheduler:
    """Episodes 0..len(generators)-1 played to their ends, at most ``slots`` of them
    begun and not ended at once. Subclasses keep the decode batch: ``_decoding``
    (how many rows decode now), ``_admit`` (the waiting episodes join it, their
    ``pending`` tokens fed), ``_step`` (one token for every decoding row), and
    ``_ended`` (an episode is over: free what it held)."""

    def __init__(self, policy, driver, generators, temperature, top_p, slots):
        self.policy, self.driver, self.gens = policy, driver, generators
        self.temperature, self.top_p = temperature, top_p
        self.slots = len(generators) if slots is None else max(1, int(slots))
        self.waiting: list[int] = []  # ready to join, in order
        self.pending: dict[int, list[int]] = {}  # tokens to feed when it joins
        self.budget: dict[int, int] = {}  # its action's token budget
        self.produced: dict[int, tuple[list[int], list[float]]] = {}
        self.returns: queue.Queue[tuple[int, Future]] = queue.Queue()
        self.away = 0  # episodes whose environment step is running
        self.next_new = 0
        self.stop = set(policy.stop_ids)
        self.pool: ThreadPoolExecutor | None = None

    def loop(self, pool: ThreadPoolExecutor | None) -> None:
        self.pool = pool
        n = len(self.gens)
        while True:
            self._collect(block=False)
            while self.next_new < n and self._occupied() < self.slots:
                self._begin(self.next_new)
                self.next_new += 1
            if not self._decoding() and not self.waiting:
                if not self.away:  # every episode has begun and ended
                    return
                self._collect(block=True)  # nothing to decode until one returns
                continue
            self._join_waiting()
            check = self.policy.stop_check
            if check is not None and check():
                raise Stopped("asked to stop during generation")
            self._step()

    # -- subclasses -------------------------------------------------------------
    def _decoding(self) -> int:
        raise NotImplementedError

    def _admit(self, joining: list[int]) -> None:
        raise NotImplementedError

    def _step(self) -> None:
        raise NotImplementedError

    def _ended(self, e: int) -> None:
        """Episode e is over (after its last action, or it never began)."""

    # -- shared -----------------------------------------------------------------
    def _join_waiting(self) -> None:
        if self.waiting:
            joining, self.waiting = self.waiting, []
            self._admit(joining)
            for e in joining:
                self.produced[e] = ([], [])

    def _occupied(self) -> int:
        return self._decoding() + self.away + len(self.waiting)

    def _begin(self, e: int) -> None:
        turn = self.driver.begin(e)
        if turn is not None:
            self.pending[e], self.budget[e] = list(turn[0]), turn[1]
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
                self.pending.pop(e, None)
                self._ended(e)
                continue
            self.pending[e].extend(turn[0])
            self.budget[e] = turn[1]
            self.waiting.append(e)

    def _sample(
        self, logits: torch.Tensor, eps: list[int]
    ) -> tuple[list[int], list[float]]:
        """argmax(p / q), q one Exp(1) vector per row from its episode's generator
        (what a batch of one draws from it; temperature 0: the most likely token);
        and its log-prob at the policy's temperature. One copy to the host."""
        if self.temperature <= 0:
            tok = logits.argmax(-1)
        else:
            probs = sampling_probs(logits, self.temperature, self.top_p)
            noise = torch.empty(
                (len(eps), probs.shape[-1]),
                dtype=torch.float32,
                device=self.gens[eps[0]].device,  # see on_device
            )
            for k, e in enumerate(eps):
                noise[k].exponential_(1, generator=self.gens[e])
            tok = (probs / noise.to(probs.device)).argmax(-1)
        lp = token_logprobs(logits, tok, self.policy.temperature)
        # Exact in float64: token ids (< 2**53) and float32 log-probs alike.
        both = torch.stack([tok.double(), lp.double()]).tolist()
        return [int(t) for t in both[0]], both[1]

    def _took(self, e: int, token: int, logprob: float) -> bool:
        """Record e's sampled token; True when its action is over."""
        tokens, logprobs = self.produced[e]
        tokens.append(token)
        logprobs.append(logprob)
        return token in self.stop or len(tokens) >= self.budget[e]

    def _dispatch(self, e: int) -> None:
        """e's action is over: hand it to the driver and its work to a thread; the
        action's last token is sampled but not yet fed (it goes first next time)."""
        tokens, logprobs = self.produced.pop(e)
        self.pending[e] = [tokens[-1]]
        work = self.driver.act(e, tokens, logprobs)
        self.away += 1
        if self.pool is None:
            fut: Future = Future()
            fut.set_result(work())
            self.returns.put((e, fut))
        else:
            fut = self.pool.submit(work)
            fut.add_done_callback(lambda f, e=e: self.returns.put((e, f)))
