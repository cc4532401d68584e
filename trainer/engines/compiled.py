"""The compiled engine: a static KV cache and a ``torch.compile``d decode step.

On CUDA, an eager decode step of a small model is bound by Python and kernel
launches, not by the GPU (a 24-layer model launches hundreds of kernels a token).
This engine keeps the eager engine's loop (no host sync per token, log-probs at the
policy's temperature) and changes three things:

* **A static cache.** The prompt is prefilled eagerly (each distinct context once),
  then copied into a ``transformers.StaticCache`` of fixed shape (rows x ``L``), its
  attention mask a fixed (rows, ``L``) tensor written in place, so every decode step
  has the same shapes and addresses. ``L`` is the longest context plus the budget,
  rounded up to :attr:`CompiledEngine.len_bucket`; the rows are rounded up to a power
  of two (extra rows copy a real one and are finished from the start). Caches are
  kept per shape and reused by later calls, so a shape is compiled once per run
  (:meth:`~trainer.engines.base.RolloutEngine.sleep` keeps them too: freeing them
  would drop every captured graph and compile again after ``wake``).
* **A compiled decode step.** ``torch.compile(mode="reduce-overhead")``: Inductor's
  kernels replayed as a CUDA graph. Anything that fails to compile or capture falls
  back to the same step run eagerly, with the reason logged once.
* **Rows leave in halves.** Finished rows are not dropped one by one (each new batch
  size would be a new graph): at a sync point, when at most a quarter of the rows are
  live, the live ones move into a cache of the next power of two.

Sampling: on the CPU the noise is drawn on the host exactly as the eager engine draws
it, so this engine gives the eager engine's tokens and log-probs row by row (the CPU
test of the cache logic, ``tests/trainer/test_compiled_engine.py``). On CUDA the
noise is drawn on the device from a generator seeded by one draw of the run's
generator per call: copying a (rows, vocabulary) block of host noise every token
would cost more than the step (128 x 150k floats is 77 MB), so the tokens differ from
the eager engine's but follow the same distribution, and a run stays reproducible
and resumable (its generator advances the same way). The CPU path of ``rollout.engine:
compiled`` runs uncompiled (``torch.compile`` buys nothing there), with the reason
logged once.
"""

from __future__ import annotations

import logging
import math

import torch
from transformers import StaticCache

from trainer.engines.base import ENGINES, Generation
from trainer.engines.eager import EagerEngine, _Decode

log = logging.getLogger(__name__)


def bucket_rows(n: int) -> int:
    """The power of two a batch of n rows runs as.

    >>> [bucket_rows(n) for n in (1, 2, 3, 5, 8, 9, 128, 129)]
    [1, 2, 4, 8, 8, 16, 128, 256]
    """
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def bucket_len(n: int, step: int) -> int:
    """n rounded up to a multiple of ``step``.

    >>> bucket_len(1, 256), bucket_len(256, 256), bucket_len(257, 256)
    (256, 256, 512)
    """
    return max(step, -(-n // step) * step)


@ENGINES.register("compiled")
class CompiledEngine(EagerEngine):
    """The eager loop over a static cache, its decode step compiled on CUDA."""

    len_bucket = 256  # cache lengths are multiples of this (fewer shapes to compile)
    # None: by device (compiled on CUDA, eager elsewhere); tests force either.
    compile: bool | None = None
    # None: by device (device noise on CUDA, the eager engine's host noise elsewhere).
    noise_on_device: bool | None = None

    def __init__(self, policy) -> None:
        super().__init__(policy)
        self._caches: dict[tuple[int, int], StaticCache] = {}
        self._step_fn = None
        self.compiled_ok: bool | None = None  # None: not tried yet
        self.fallback_reason: str | None = None
        self.shapes: set[tuple[int, int]] = set()  # (rows, L) decoded so far

    # ----- configuration ------------------------------------------------------------
    def compiling(self) -> bool:
        if self.compile is not None:
            return bool(self.compile)
        return self.policy.device.type == "cuda"

    def device_noise(self) -> bool:
        if self.noise_on_device is not None:
            return bool(self.noise_on_device)
        return self.policy.device.type == "cuda"

    def step_fn(self):
        """The decode step: compiled once per engine, or the plain module call."""
        if self._step_fn is not None:
            return self._step_fn
        self._step_fn = _eager_step
        if not self.compiling():
            self._note_fallback(
                f"rollout.engine compiled on {self.policy.device.type}: the decode "
                "step runs uncompiled (torch.compile is used on CUDA only)"
            )
        else:
            try:
                import torch._dynamo

                cfg = torch._dynamo.config
                cfg.cache_size_limit = max(cfg.cache_size_limit, 64)
                if hasattr(cfg, "recompile_limit"):
                    cfg.recompile_limit = max(cfg.recompile_limit, 64)
                self._step_fn = torch.compile(_eager_step, mode="reduce-overhead")
            except Exception as exc:  # noqa: BLE001  (any failure: run eagerly)
                self._note_fallback(f"torch.compile is unavailable: {exc!r}")
        return self._step_fn

    def _note_fallback(self, reason: str) -> None:
        if self.fallback_reason is None:
            log.warning("%s", reason)
        self.fallback_reason = reason
        self.compiled_ok = False

    def cache_for(self, rows: int, length: int) -> StaticCache:
        """The static cache of this shape, reused across calls (a compiled step
        is specialised to its tensors' addresses)."""
        key = (rows, length)
        cache = self._caches.get(key)
        if cache is None:
            model = self.policy.model
            config = getattr(model, "config", None)
            cache = self._caches[key] = StaticCache(config=config, max_cache_len=length)
        return cache

    @torch.no_grad()
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
        run = _StaticDecode(self, contexts, budgets, with_logprobs)
        if self.device_noise() and temperature > 0:
            seed = (
                int(torch.randint(0, 2**62, (1,), generator=generator))
                if generator is not None
                else int(torch.seed())
            )
            run.device_gen = torch.Generator(device=self.policy.device).manual_seed(
                seed
            )
            generator = None  # the host generator has drawn its one number
        run.loop(temperature, top_p, generator, self.steps_per_sync())
        return run.result(budgets)

    def run_step(self, *args) -> torch.Tensor:
        """One decode step through the compiled function; on its first failure,
        the same step eagerly from then on (the reason logged once)."""
        fn = self.step_fn()
        if fn is _eager_step:
            return fn(*args)
        try:
            out = fn(*args)
            self.compiled_ok = True
            return out
        except Exception as exc:  # noqa: BLE001  (compile or capture failed)
            self._note_fallback(f"compiled decode failed, running eagerly: {exc!r}")
            self._step_fn = _eager_step
            return _eager_step(*args)


def _eager_step(model, tok, mask, pos, cache) -> torch.Tensor:
    """Next-token logits (rows, V) after feeding ``tok`` (rows, 1)."""
    out = model(
        input_ids=tok,
        attention_mask=mask,
        position_ids=pos,
        cache=cache,
        use_cache=True,
    )
    return out.logits[:, -1, :]


class _StaticDecode(_Decode):
    """The eager engine's decode state over a static cache. Batch position k holds
    original row ``rows[k]``; padding rows (to a power of two) hold row index B, a
    scratch row of the output buffers, and are finished from the start."""

    def __init__(self, engine: CompiledEngine, contexts, budgets, with_logprobs):
        self.engine = engine
        self.device_gen: torch.Generator | None = None
        policy = engine.policy
        # The prefill's cache is copied into the static one at once: no room reserved.
        super().__init__(policy, contexts, budgets, with_logprobs, None, False)
        dev = self.dev
        # Output buffers gain scratch row B for padding rows.
        self.tokens = _with_scratch_row(self.tokens, policy.pad_id)
        self.length = _with_scratch_row(self.length, 0)
        if self.lps is not None:
            self.lps = _with_scratch_row(self.lps, 0.0)
        # Prefill width P; the static cache holds P + steps positions, bucketed.
        prompt = self.mask.shape[1]
        self.pos_col = prompt  # the mask column the next fed token occupies
        self.L = bucket_len(prompt + max(self.steps, 1), engine.len_bucket)
        rows = bucket_rows(self.B)
        pad = rows - self.B
        index = torch.cat(
            [
                torch.arange(self.B, device=dev),
                torch.zeros(pad, dtype=torch.long, device=dev),
            ]
        )
        self.rows = torch.cat(
            [self.rows, torch.full((pad,), self.B, dtype=torch.long, device=dev)]
        )
        self.done = torch.cat(
            [self.done, torch.ones(pad, dtype=torch.bool, device=dev)]
        )
        self.limit = self.limit[index]
        self.next_pos = self.next_pos[index]
        self.logits = self.logits[index]
        self.static = engine.cache_for(rows, self.L)
        layers = self.out.cache.layers
        self._load_static(
            [(layer.keys[index], layer.values[index]) for layer in layers],
            self.mask[index],
        )
        self.out = None  # the dynamic cache is no longer needed

    def _load_static(self, kv: list[tuple[torch.Tensor, torch.Tensor]], mask) -> None:
        """Write per-layer (rows, heads, width, dim) keys/values and the (rows,
        width) mask into the static cache and mask, positions [0, width)."""
        width = mask.shape[1]
        for layer, (k, v) in zip(self.static.layers, kv, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(k, v)
            layer.keys[:, :, :width].copy_(k)
            layer.values[:, :, :width].copy_(v)
            layer.cumulative_length.fill_(width)
        rows = mask.shape[0]
        self.static_mask = torch.zeros(
            (rows, self.L), dtype=mask.dtype, device=mask.device
        )
        self.static_mask[:, :width] = mask
        self.engine.shapes.add((rows, self.L))

    def _step(self, t: int, temperature: float, top_p: float, gen) -> None:
        if self.device_gen is None or temperature <= 0:
            return super()._step(t, temperature, top_p, gen)
        # Device noise: Exp(1) per (row, token), argmax(p / q) as multinomial draws.
        self._sample_with(
            t,
            temperature,
            top_p,
            lambda probs: torch.empty_like(probs).exponential_(
                1, generator=self.device_gen
            ),
        )

    def _noise_rows(self) -> torch.Tensor:
        # Padding rows (index B) take row B-1's noise; their tokens are discarded.
        return self.rows.clamp(max=self.B - 1)

    def _forward(self) -> None:
        """Feed the sampled tokens through the static cache."""
        col = self.pos_col
        self.static_mask[:, col] = (~self.done).to(self.static_mask.dtype)
        self.logits = self.engine.run_step(
            self.policy.model,
            self.tok.unsqueeze(1),
            self.static_mask,
            self.next_pos,
            self.static,
        ).clone()  # a graph's output is overwritten by its next replay
        self.pos_col = col + 1
        self.next_pos = self.next_pos + 1

    def _drop_finished(self) -> bool:
        """False when no row is live; when at most a quarter of the rows are, move
        the live ones into a cache of the next power of two (half or less)."""
        live = int((~self.done).sum())
        if live == 0:
            return False
        rows = len(self.rows)
        target = bucket_rows(live)
        if live * 4 > rows or target >= rows:
            return True
        keep = (~self.done).nonzero().flatten()
        index = torch.cat(
            [keep, keep[:1].expand(target - live)]
        )  # padding rows copy a live one
        old = self.static
        self.static = self.engine.cache_for(target, self.L)
        width = self.pos_col
        self._load_static(
            [
                (layer.keys[index, :, :width], layer.values[index, :, :width])
                for layer in old.layers
            ],
            self.static_mask[index, :width],
        )
        scratch = torch.full(
            (target - live,), self.B, dtype=torch.long, device=self.dev
        )
        self.rows = torch.cat([self.rows[keep], scratch])
        self.done = torch.cat(
            [
                self.done[keep],
                torch.ones(target - live, dtype=torch.bool, device=self.dev),
            ]
        )
        self.limit, self.next_pos = self.limit[index], self.next_pos[index]
        self.logits = self.logits[index]
        if self.tok is not None:
            self.tok = self.tok[index]
        return True

    def result(self, budgets: list[int]) -> Generation:
        self.tokens = self.tokens[: self.B]
        self.length = self.length[: self.B]
        if self.lps is not None:
            self.lps = self.lps[: self.B]
        return super().result(budgets)


def _with_scratch_row(buf: torch.Tensor, fill) -> torch.Tensor:
    extra = torch.full((1, *buf.shape[1:]), fill, dtype=buf.dtype, device=buf.device)
    return torch.cat([buf, extra])
