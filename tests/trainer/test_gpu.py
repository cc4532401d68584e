"""The CUDA path: bf16 policy, sampling and updates on the GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig, TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def test_it_trains_in_bf16_on_the_gpu(reward_fn):
    cfg = TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "model": {"device": "cuda"},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        }
    )
    sink = ListSink()
    result = train(cfg, make_env("calc", seed=0), reward_fn, sink)
    assert result.status == "succeeded"
    assert sink.of_type("run_started")[0]["device"].startswith("cuda")


def test_the_compiled_engine_compiles_and_samples_the_eager_engines_tokens():
    """float32 and host noise, so both engines draw the same numbers: the compiled
    decode step (Inductor kernels replayed as a CUDA graph) must give the eager
    engine's tokens. Kernels may round differently, so a near-tie can flip one
    token; nearly every row must match and the log-probs agree closely."""
    import random

    from trainer.engines import build_engine
    from trainer.policy import Policy

    torch.manual_seed(0)
    words = ["calc", "answer", "+", "=", *map(str, range(10))]
    policy = Policy.build(
        ModelConfig(size="small", device="cuda", dtype="float32"), words
    )
    rng = random.Random(0)
    vocab = len(policy.tokenizer)
    contexts = [
        [policy.bos_id] + [rng.randrange(4, vocab) for _ in range(rng.randrange(40))]
        for _ in range(24)
    ]
    budgets = [rng.randrange(1, 48) for _ in contexts]
    compiled = build_engine("compiled", policy)
    compiled.noise_on_device = False
    outs = []
    for engine in (build_engine("eager", policy), compiled, compiled):
        gen = torch.Generator().manual_seed(1)
        outs.append(
            engine.generate(
                contexts,
                budgets,
                temperature=1.0,
                top_p=1.0,
                generator=gen,
                with_logprobs=True,
            )
        )
    assert compiled.compiled_ok is True, compiled.fallback_reason
    eager, first, again = outs
    assert first.tokens == again.tokens  # replays agree with the first capture
    same = sum(a == b for a, b in zip(eager.tokens, first.tokens, strict=True))
    assert same >= len(contexts) - 2, (same, len(contexts))
    for a, b, ta, tb in zip(
        eager.logprobs, first.logprobs, eager.tokens, first.tokens, strict=True
    ):
        if ta == tb:
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=2e-3)


def test_a_bf16_run_trains_through_the_compiled_engine(reward_fn):
    cfg = TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "model": {"device": "cuda"},
            "rollout": {
                "tasks_per_step": 4,
                "group_size": 4,
                "max_turns": 2,
                "engine": "compiled",
            },
        }
    )
    sink = ListSink()
    result = train(cfg, make_env("calc", seed=0), reward_fn, sink)
    assert result.status == "succeeded"
    lengths = [e["length"] for e in sink.of_type("trajectory")]
    assert lengths and all(n > 0 for n in lengths)
