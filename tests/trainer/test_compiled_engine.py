"""The compiled engine's cache logic, on the CPU (issue 24 item 4): over a static
cache, with rows bucketed to powers of two and compacted in halves, it samples the
eager engine's tokens and log-probs row by row; on CUDA its noise comes from a
device generator seeded by one draw of the run's generator; a decode step that
cannot be compiled runs eagerly with the reason logged. The compiled path itself
runs in ``tests/trainer/test_gpu.py`` and ``bench/gpu_bench.py --engine compiled``."""

from __future__ import annotations

import logging

import pytest
import torch
from chatmodel import build_chat_model
from engine_batches import ragged_batch

from trainer.config import ModelConfig, TrainConfig
from trainer.engines import build_engine
from trainer.engines.compiled import CompiledEngine, bucket_rows
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.policy import Policy

WORDS = ["calc", "answer", "+", "=", *map(str, range(10))]


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return Policy.build(ModelConfig(size="tiny", device="cpu"), WORDS, temperature=0.7)


def _batch(policy: Policy, seed: int, shared: bool):
    return ragged_batch(policy, seed, shared, rows=(2, 12))


def _generate(engine, contexts, budgets, seed, **kw):
    gen = torch.Generator().manual_seed(seed)
    out = engine.generate(contexts, budgets, generator=gen, with_logprobs=True, **kw)
    return out, gen.get_state()


def _compiled(policy: Policy, **attrs) -> CompiledEngine:
    engine = build_engine("compiled", policy)
    engine.len_bucket = 16  # several cache lengths even for short contexts
    for k, v in attrs.items():
        setattr(engine, k, v)
    return engine


@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": 0.7, "top_p": 1.0},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 0.0, "top_p": 1.0},
    ],
)
def test_the_static_cache_samples_the_eager_engines_tokens_row_by_row(policy, kw):
    compiled = _compiled(policy)
    for seed in range(4):
        contexts, budgets = _batch(policy, seed, shared=seed % 2 == 0)
        a, state_a = _generate(
            build_engine("eager", policy), contexts, budgets, seed, **kw
        )
        b, state_b = _generate(compiled, contexts, budgets, seed, **kw)
        assert b.tokens == a.tokens
        assert torch.equal(state_a, state_b)  # the next turn draws the same numbers
        for x, y in zip(a.logprobs, b.logprobs, strict=True):
            assert len(x) == len(y)
            assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-5, rtol=0)
    # The caches are kept per shape and reused by later calls.
    assert len(compiled._caches) == len(compiled.shapes) > 1


def test_a_chat_model_with_lora_samples_the_same_through_the_static_cache(tmp_path):
    path = build_chat_model(tmp_path)
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    torch.manual_seed(0)
    p = Policy.build(ModelConfig(path=str(path), lora=lora, device="cpu"), [])
    with torch.no_grad():
        for name, param in p.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    for seed in range(3):
        contexts, budgets = _batch(p, seed, shared=seed % 2 == 1)
        kw = {"temperature": 1.0, "top_p": 0.95}
        a, _ = _generate(build_engine("eager", p), contexts, budgets, seed, **kw)
        b, _ = _generate(_compiled(p), contexts, budgets, seed, **kw)
        assert b.tokens == a.tokens


class _DecodeRows:
    """The batch size of every decode forward (one token per row)."""

    def __init__(self, policy: Policy) -> None:
        self.sizes: list[int] = []
        self.handle = policy.model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        if kwargs["input_ids"].shape[1] == 1:
            self.sizes.append(kwargs["input_ids"].shape[0])


def test_rows_run_as_powers_of_two_and_leave_in_halves(policy):
    """Budgets 1..13, one row each: 13 rows run as 16, and the live rows move into
    a smaller cache once at most a quarter of the batch is live (a new batch size is
    a new compiled graph, so sizes change by halves, not one row at a time)."""
    budgets = list(range(1, 14))
    contexts = [[policy.bos_id, 5 + i % 3] for i in range(13)]
    saved = policy.stop_ids
    policy.stop_ids = [policy.model.config.vocab_size]  # never sampled: budgets rule
    seen = _DecodeRows(policy)
    try:
        out, _ = _generate(
            _compiled(policy), contexts, budgets, 0, temperature=1.0, top_p=1.0
        )
    finally:
        seen.handle.remove()
        policy.stop_ids = saved
    assert [len(t) for t in out.tokens] == budgets
    # Live after sampling token t: 12 - t. 16 rows until a quarter of them (4)
    # are live (t = 8), then 4 rows until a quarter of those (1) is (t = 11).
    assert seen.sizes == [16] * 8 + [4] * 3 + [1]
    assert set(seen.sizes) <= {bucket_rows(n) for n in range(1, 17)}


def test_device_noise_is_seeded_by_one_draw_of_the_runs_generator(policy):
    """The CUDA sampling path, run on the CPU: reproducible for a seed, the run's
    generator advanced by exactly one draw, and tokens drawn from the policy's
    distribution (a chi-square test of one context's first token)."""
    engine = _compiled(policy, noise_on_device=True)
    contexts, budgets = _batch(policy, 3, shared=False)
    kw = {"temperature": 1.0, "top_p": 1.0}
    a, state_a = _generate(engine, contexts, budgets, 7, **kw)
    b, state_b = _generate(engine, contexts, budgets, 7, **kw)
    assert a.tokens == b.tokens and torch.equal(state_a, state_b)
    one_draw = torch.Generator().manual_seed(7)
    torch.randint(0, 2**62, (1,), generator=one_draw)
    assert torch.equal(state_a, one_draw.get_state())

    rows = 4000
    ctx = [policy.bos_id, 5, 6]
    out, _ = _generate(engine, [ctx] * rows, [1] * rows, 11, **kw)
    counts = torch.bincount(
        torch.tensor([t[0] for t in out.tokens]), minlength=len(policy.tokenizer)
    ).double()
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ctx])).logits[0, -1].double()
    p = torch.softmax(logits / kw["temperature"], -1)
    seen = p * rows >= 5  # tokens with enough expected draws to test
    expected = p[seen] * rows
    chi2 = float(((counts[seen] - expected) ** 2 / expected).sum())
    dof = int(seen.sum()) - 1
    assert chi2 < dof + 5 * (2 * dof) ** 0.5, (chi2, dof)  # ~5 sigma


def test_a_decode_step_that_fails_to_compile_runs_eagerly_with_the_reason_logged(
    policy, caplog
):
    def broken(*args):
        raise RuntimeError("no graph for you")

    engine = _compiled(policy)
    engine._step_fn = broken  # as a compiled function that fails on first use
    contexts, budgets = _batch(policy, 1, shared=False)
    kw = {"temperature": 0.7, "top_p": 1.0}
    with caplog.at_level(logging.WARNING, logger="trainer.engines.compiled"):
        b, _ = _generate(engine, contexts, budgets, 1, **kw)
    a, _ = _generate(build_engine("eager", policy), contexts, budgets, 1, **kw)
    assert b.tokens == a.tokens
    assert engine.compiled_ok is False
    assert "no graph for you" in engine.fallback_reason
    assert "running eagerly" in caplog.text


def test_on_the_cpu_the_compiled_engine_says_it_runs_uncompiled(policy, caplog):
    engine = build_engine("compiled", policy)
    with caplog.at_level(logging.WARNING, logger="trainer.engines.compiled"):
        engine.generate(
            [[policy.bos_id, 5]],
            [3],
            temperature=1.0,
            top_p=1.0,
            generator=torch.Generator().manual_seed(0),
            with_logprobs=False,
        )
    assert engine.compiled_ok is False
    assert "uncompiled" in caplog.text and "CUDA only" in caplog.text


def test_a_run_with_the_compiled_engine_trains_as_one_with_the_eager_engine(reward_fn):
    """The same seed, the same samples: two steps through the real loop record the
    same trajectories and rewards with either engine (on the CPU, where the compiled
    engine's noise is the eager engine's)."""
    rewards = {}
    for engine in ("eager", "compiled"):
        cfg = TrainConfig.model_validate(
            {
                "steps": 2,
                "env": {"name": "calc"},
                "model": {"size": "tiny", "device": "cpu"},
                "rollout": {"tasks_per_step": 2, "group_size": 3, "engine": engine},
            }
        )
        sink = ListSink()
        assert (
            train(cfg, make_env("calc", seed=0), reward_fn, sink).status == "succeeded"
        )
        rewards[engine] = [
            (
                e["step"],
                e["index"],
                [s["token_ids"] for s in e["segments"]],
                e["reward"],
            )
            for e in sink.of_type("trajectory")
        ]
    assert rewards["eager"] == rewards["compiled"] and rewards["eager"]
