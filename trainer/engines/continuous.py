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
* **Each episode keeps its KV cache across its turns, in place.** An episode owns
  a row of the slot buffers (:mod:`trainer.engines.slots`) from its first token to
  its end: a decode step writes each row's token at its own next column, a row
  that leaves for its environment step leaves its keys and values where they are,
  and when it rejoins only its last action token and the observation go through
  the model, written after them (no re-prefill, no cache copied on leave, rejoin
  or decode). A model the slot rows do not fit (sliding-window layers, flash
  attention) keeps a re-formed batch instead
  (:mod:`trainer.engines.continuous_batch`): the same episodes, more copying.

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
On a GPU each episode's generator is re-made on the device from its seed
(:func:`trainer.engines.episodes.on_device`; ``noise_on_device``): still one
stream per episode, independent of the batch, but the device's numbers, so the
tokens are not the eager engine's there.

**Threads.** Only the work :meth:`EpisodeDriver.act` returns (the environment
step) runs on the worker threads (``workers``), one call per episode at a time;
recording, tokenizing and the model stay on the decode thread. ``workers=0`` (the
default) runs that work inline.

This module knows tensors and the driver's three calls; nothing of environments.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import torch

from trainer.engines.base import ENGINES
from trainer.engines.continuous_batch import BatchRun
from trainer.engines.eager import EagerEngine
from trainer.engines.episodes import (  # noqa: F401  (the engine's public names)
    EpisodeDriver,
    Scheduler,
    Turn,
    episode_generators,
    on_device,
)
from trainer.engines.slots import ATTENTION, SlotCache, supports

log = logging.getLogger(__name__)

# On an accelerator, a context of at least this many tokens is kept once, in the
# prefix cache, for every row that begins from it (ContinuousEngine.shared_prefix):
# a GRPO group's G rows then hold one copy of their prompt's keys and values, and
# each decode step reads it once, not G times.
SHARED_PREFIX = 64


@ENGINES.register("continuous")
class ContinuousEngine(EagerEngine):
    """The eager engine plus :meth:`run_episodes`: the rollout hands it whole
    episodes (``rollout.engine: continuous``). ``generate`` (evaluation, what-ifs)
    is the eager engine's."""

    continuous = True
    # Threads stepping environments (0: on the decode thread). 0 by default: the
    # built-in environments step in microseconds, and on a 2-core CPU the pool
    # made the swarm shape slower (bench/rollout_bench.py); an environment whose
    # tool calls wait (a sandbox, a network call) wants a few. The rollout passes
    # rollout.env_workers and rollout.max_live_episodes where they are set (not 0);
    # these are the defaults otherwise.
    workers = 0
    slots: int | None = None  # episodes in the decode batch at most (None: all)
    in_place: bool | None = None  # slot rows (None: where the model supports them)
    # Each episode's noise drawn where the logits are (episodes.on_device); False:
    # from the host generators, as the eager engine draws (a GPU test compares).
    noise_on_device = True
    cache_bytes: int | None = None  # the last slot run's key/value buffers
    # A context at least this many tokens long (a GRPO group's prompt) is kept
    # once, not copied to each row that begins from it, and attention reads it
    # once for them all (slots.SlotCache.share); None: always copied;
    # "auto": SHARED_PREFIX tokens on an accelerator, copied on the CPU (there a
    # second attention call costs more than the keys it saves reading:
    # bench/rollout_bench.py --engines reference,continuous:copied,continuous:shared).
    shared_prefix: int | str | None = "auto"

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
        in_place = self.in_place
        if in_place is None:
            in_place = supports(self.policy.model)
            if not in_place and not getattr(self, "_said", False):
                self._said = True
                log.info(
                    "continuous engine: this model's attention cannot use slot "
                    "rows (sliding windows or its own masks); its decode batch is "
                    "re-formed as episodes leave and join"
                )
        if self.noise_on_device:
            generators = on_device(generators, self.policy.device)
        if in_place:
            run = SlotRun(self.policy, driver, generators, temperature, top_p, slots)
            run.lean = self._lean()
            run.shared_prefix = self._shared_prefix()
        else:
            run = BatchRun(self.policy, driver, generators, temperature, top_p, slots)
        config = self.policy.model.config
        attention = config._attn_implementation
        if in_place:  # the slot rows' attention for this run's forwards only
            config._attn_implementation = ATTENTION
        try:
            if workers <= 0:
                run.loop(None)
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="env-step") as p:
                    run.loop(p)
        finally:
            config._attn_implementation = attention
        # The most the run's key/value buffers held (they grow, never shrink).
        self.cache_bytes = run.cache.nbytes() if in_place else None

    def _shared_prefix(self) -> int | None:
        if self.shared_prefix != "auto":
            return self.shared_prefix
        return None if torch.device(self.policy.device).type == "cpu" else SHARED_PREFIX


class SlotRun(Scheduler):
    """Episodes on the rows of a :class:`SlotCache`: row ``row[e]`` is episode e's
    from its first token to its end; ``decoding`` holds the episodes that sample
    next, with their next-token logits in ``logits``; ``extending`` those back
    from their tool call, whose pending tokens go into the next decode forward."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        rows = min(self.slots, len(self.gens))
        self.cache = SlotCache(rows)
        self.row: dict[int, int] = {}  # episode -> its row
        self.owner: list[int | None] = [None] * rows  # row -> its episode
        self.decoding: list[int] = []  # episodes sampling next, by row
        self.extending: list[int] = []  # episodes fed their pending tokens next
        self.logits: torch.Tensor | None = None  # (rows, V)
        dev = self.policy.device
        self.device = torch.device(dev) if not isinstance(dev, torch.device) else dev
        self.dtype = self.policy.model.get_input_embeddings().weight.dtype
        self.lean = None  # trainer.engines.lean's forward, else the model's
        self.shared_prefix: int | None = None  # see ContinuousEngine.shared_prefix
        # Contexts in the prefix cache: context -> its row, row -> its context, and
        # the logits of each row's last token (a later episode's first sample).
        self.held: dict[tuple[int, ...], int] = {}
        self.context_of: dict[int, tuple[int, ...]] = {}
        self.first: torch.Tensor | None = None

    def _forward(self, args, rows: torch.Tensor | None = None, cache=None):
        """The logits of the last query of query rows ``rows`` (None: all), over
        ``cache`` (None: the rows')."""
        cache = self.cache if cache is None else cache
        if self.lean is not None:
            return self.lean(cache, **args, rows=rows)
        out = self.policy.model(**args, cache=cache, use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1, :]
        return logits if rows is None else logits.index_select(0, rows)

    def _decoding(self) -> int:
        return len(self.decoding) + len(self.extending)

    def _ended(self, e: int) -> None:
        r = self.row.pop(e, None)
        if r is not None:
            self.owner[r] = None
            self.cache.clear(r)

    def _admit(self, joining: list[int]) -> None:
        """New episodes take free rows, each distinct context read once: kept once
        where it is long enough to be worth it (``shared_prefix``: a row of the
        cache's ``prefix``, which attention reads once for all the rows that
        begin from it, and which episodes admitted later with the same context
        share too, while any row still does), else fed to one row and copied to
        the others; returning ones wait for the next decode forward, which feeds
        them their pending tokens after their own keys and values."""
        new = [e for e in joining if e not in self.row]
        self.extending += [e for e in joining if e in self.row]
        if not new:
            return
        free = iter(r for r, o in enumerate(self.owner) if o is None)
        for e in new:
            self.row[e] = next(free)
            self.owner[self.row[e]] = e
        groups: dict[tuple[int, ...], list[int]] = {}
        for e in new:
            groups.setdefault(tuple(self.pending[e]), []).append(e)
        least = self.shared_prefix
        shared = {c: g for c, g in groups.items() if least and len(c) >= least}
        if shared:
            self._share(shared)
        copied = [g for c, g in groups.items() if c not in shared]
        if copied:
            self._feed([g[0] for g in copied])
        for g in copied:
            for e in g[1:]:
                self.cache.copy_row(self.row[g[0]], self.row[e])
                self.logits[self.row[e]] = self.logits[self.row[g[0]]]
        for e in new:
            self.pending[e] = []
        self.decoding = sorted(self.decoding + new, key=self.row.get)

    def _share(self, groups: dict[tuple[int, ...], list[int]]) -> None:
        """Each context's episodes share its row of the prefix cache: the row a
        context already has while a row shares it (episodes of a group admitted
        as slots free up), else a free row it is fed to, once
        (:meth:`SlotCache.share`)."""
        prefix = self.cache.prefix
        if prefix is None:  # as many rows as prefixes, no room to decode on
            prefix = self.cache.prefix = SlotCache(0, capacity=2, headroom=False)
        fresh = [c for c in groups if not self._held(c)]
        if fresh:
            free = [r for r in range(prefix.rows) if r not in self.cache.sharing]
            need = len(fresh) - len(free)
            if need > 0:
                free += range(prefix.rows, prefix.rows + need)
                prefix.add_rows(need)
            at = free[: len(fresh)]
            pad = self.policy.pad_id
            args = prefix.feed(at, list(map(list, fresh)), pad, self.device, self.dtype)
            logits = self._forward(args, cache=prefix)
            if self.logits is None:
                self.logits = logits.new_zeros((self.cache.rows, logits.shape[-1]))
            if self.first is None:
                self.first = logits.new_zeros((len(self.owner), logits.shape[-1]))
            for k, (p, c) in enumerate(zip(at, fresh, strict=True)):
                self.held[c], self.context_of[p] = p, c
                self.first[p] = logits[k]
        for c, g in groups.items():
            p, rows = self.held[c], [self.row[e] for e in g]
            self.cache.share(p, rows)
            self.logits[torch.tensor(rows, device=self.logits.device)] = self.first[p]

    def _held(self, context: tuple[int, ...]) -> bool:
        """Whether ``context`` is in a row of the prefix cache a row still shares
        (a freed row may hold another context since)."""
        p = self.held.get(context)
        return (
            p is not None and p in self.cache.sharing and self.context_of[p] == context
        )

    def _feed(self, eps: list[int]) -> None:
        """One forward of the episodes' pending tokens (new episodes' contexts, or
        returning ones' when no row decodes): every row when each is fed (no
        copy of the cache), else only theirs (gathered)."""
        tokens = [self.pending[e] for e in eps]
        rows = [self.row[e] for e in eps]
        every = len(rows) == self.cache.rows
        if every:
            per_row: list[list[int]] = [[] for _ in range(self.cache.rows)]
            for r, t in zip(rows, tokens, strict=True):
                per_row[r] = t
            args = self.cache.feed(
                None, per_row, self.policy.pad_id, self.device, self.dtype
            )
        else:
            args = self.cache.feed(
                rows, tokens, self.policy.pad_id, self.device, self.dtype
            )
        logits = self._forward(args)
        if every:
            self.logits = logits
            return
        if self.logits is None:
            self.logits = logits.new_zeros((self.cache.rows, logits.shape[-1]))
        self.logits[torch.tensor(rows, device=logits.device)] = logits

    def _step(self) -> None:
        """Sample one token of every decoding row; the rows whose action goes on
        are fed their token, in the same forward as the pending tokens of the
        episodes back from their tool calls (those that returned by now: on the
        decode thread, the ones whose action just ended); the others stay where
        they are until they rejoin."""
        self._compact()
        going: dict[int, int] = {}  # row -> its token
        if self.decoding:
            eps = self.decoding
            idx = torch.tensor([self.row[e] for e in eps], device=self.device)
            toks, lps = self._sample(self.logits.index_select(0, idx), eps)
            for k, e in enumerate(eps):
                if self._took(e, toks[k], lps[k]):
                    self._dispatch(e)
                else:
                    going[self.row[e]] = toks[k]
            self._collect(block=False)
            self._join_waiting()  # returning episodes: extending
        back, self.extending = self.extending, []
        if going or back:
            extend = {self.row[e]: self.pending[e] for e in back}
            args = self.cache.step(
                going, extend, self.policy.pad_id, self.device, self.dtype
            )
            # Query r is row r: the logits of its next token, fed or extended.
            rows = torch.tensor([*going, *extend], device=self.device)
            self.logits[rows] = self._forward(args, rows)
        for e in back:
            self.pending[e] = []
        live = [e for e in self.row if self.row[e] in going] + back
        self.decoding = sorted(live, key=self.row.get)

    def _compact(self) -> None:
        """No episode is left to begin: rows of ended episodes are filled by the
        last rows in use (one row's keys and values copied each), and the
        buffers' first rows only are used, so that a step computes no row of an
        ended episode; the prompts still shared move to the prefix cache's first
        rows likewise (read as a slice, not gathered)."""
        if self.next_new < len(self.gens):
            return
        if self.cache.compact_prefixes():  # no episode is left to admit
            self.held, self.context_of = {}, {}
        used = sum(o is not None for o in self.owner)
        if used == len(self.owner) or used == 0:
            return
        holes = (r for r in range(used) if self.owner[r] is None)
        for src in range(used, len(self.owner)):
            e = self.owner[src]
            if e is None:
                continue
            dst = next(holes)
            self.cache.move(src, dst)
            self.logits[dst] = self.logits[src]
            self.owner[dst], self.owner[src] = e, None
            self.row[e] = dst
        self.cache.shrink(used)
        self.owner = self.owner[:used]
        self.logits = self.logits[:used]
