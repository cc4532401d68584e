"""The CUDA path: bf16 policy, sampling and updates on the GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig, RolloutConfig, TrainConfig
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


def test_the_continuous_engine_draws_each_episodes_noise_on_the_gpu():
    """On CUDA the episodes' generators live on the device (no rows x vocabulary
    block of host noise copied per token): a run is reproducible, each episode's
    stream is the device generator of its seed, and an episode's tokens do not
    depend on what shares its batch. Batch size can change a CUDA kernel's
    rounding, so a near-tie may flip a token in a few episodes; most must match."""

    from trainer.engines.continuous import episode_generators, on_device
    from trainer.rollout import play

    gens = episode_generators(torch.Generator().manual_seed(0), 2)
    moved = on_device(gens, "cuda")
    assert [g.device.type for g in moved] == ["cuda", "cuda"]
    want = torch.empty(5, device="cuda").exponential_(
        1, generator=torch.Generator(device="cuda").manual_seed(gens[1].initial_seed())
    )
    assert torch.equal(
        torch.empty(5, device="cuda").exponential_(1, generator=moved[1]), want
    )

    env, policy, cfg, tasks = _swarm_on_the_gpu("float32", group_size=4)
    engine = policy.use_engine("continuous")

    def episodes(slots):
        engine.slots = slots
        gen = torch.Generator().manual_seed(3)
        return [ro.token_ids for ro in play(policy, env, tasks, cfg, generator=gen)]

    whole = episodes(None)
    assert episodes(None) == whole  # reproducible
    assert len({len(t) for t in whole}) > 1
    narrow = episodes(2)
    same = sum(a == b for a, b in zip(whole, narrow, strict=True))
    assert same >= len(whole) - 2, (same, len(whole))


def test_a_bf16_run_trains_with_optim_compile_on_the_gpu(reward_fn, monkeypatch):
    """optim.compile on CUDA: the update's layer parts run compiled (Inductor's
    GPU kernels, bf16), nothing falls back, and the run trains."""
    import trainer.update
    from trainer.compiled_layers import compiled_layers

    built = []
    monkeypatch.setattr(
        trainer.update,
        "compiled_layers",
        lambda model, strategy: (
            built.append(compiled_layers(model, strategy)) or built[-1]
        ),
    )
    cfg = TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "model": {"device": "cuda"},
            "optim": {"compile": True},
            "rollout": {"tasks_per_step": 4, "group_size": 4, "max_turns": 2},
        }
    )
    result = train(cfg, make_env("calc", seed=0), reward_fn, ListSink())
    assert result.status == "succeeded"
    assert built and built[-1] is not None
    assert built[-1].proven and built[-1].failed is None


def test_micro_batches_on_the_gpu_train_as_the_whole_minibatch(reward_fn):
    """optim.micro_batch_size on CUDA (float32, so that the two runs can agree):
    the same rewards, losses and gradient norms as one forward of the whole
    minibatch."""
    sinks = []
    for micro in (0, 2):
        cfg = TrainConfig.model_validate(
            {
                "steps": 2,
                "env": {"name": "calc"},
                "model": {"device": "cuda", "size": "small", "dtype": "float32"},
                "optim": {"micro_batch_size": micro},
                "rollout": {"tasks_per_step": 4, "group_size": 4, "max_turns": 2},
            }
        )
        sink = ListSink()
        result = train(cfg, make_env("calc", seed=0), reward_fn, sink)
        assert result.status == "succeeded"
        sinks.append([e["metrics"] for e in sink.of_type("step")])
    for a, b in zip(*sinks, strict=True):
        assert b["reward"] == a["reward"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3, abs=1e-6)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_continuous_engine_keeps_each_groups_prompt_once_on_the_gpu(
    dtype, monkeypatch
):
    """On CUDA the engine shares a group's prompt by default (from SHARED_PREFIX
    tokens; here from one): its attention runs as products with log-sum-exps
    (the CPU's fused kernel is not there), one prefix row a group, and the
    episodes are the copied layout's but for a near-tie flipped by rounding."""

    from trainer.engines import continuous
    from trainer.engines.continuous import ContinuousEngine

    caches = []

    class Spy(continuous.SlotRun):
        def __init__(self, *args):
            super().__init__(*args)
            caches.append(self.cache)

    monkeypatch.setattr(continuous, "SlotRun", Spy)
    from trainer.rollout import play

    assert ContinuousEngine.shared_prefix == "auto"
    env, policy, cfg, tasks = _swarm_on_the_gpu(dtype, group_size=8)

    def episodes(shared_prefix):
        engine = policy.use_engine("continuous")
        engine.shared_prefix = shared_prefix
        gen = torch.Generator().manual_seed(3)
        return [ro.token_ids for ro in play(policy, env, tasks, cfg, generator=gen)]

    shared = episodes(1)
    assert caches[-1].prefix.rows == cfg.tasks_per_step and not caches[-1].sharing
    copied = episodes(None)
    assert caches[-1].prefix is None
    same = sum(a == b for a, b in zip(shared, copied, strict=True))
    limit = 2 if dtype == "float32" else 8
    assert same >= len(shared) - limit, (same, len(shared))


def _swarm_on_the_gpu(dtype: str, group_size: int):
    """The small model on CUDA with its stop tokens lifted (ragged, multi-turn
    swarm episodes): the environment, policy, rollout config and 4 tasks."""
    import random

    from trainer.policy import Policy

    env = make_env("swarm", seed=0)
    torch.manual_seed(0)
    policy = Policy.build(
        ModelConfig(size="small", device="cuda", dtype=dtype),
        env.vocabulary(),
        temperature=0.9,
    )
    lift = torch.zeros(policy.model.config.vocab_size, device="cuda")
    lift[list(policy.stop_ids)] = 3.0
    policy.model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: out + lift.to(out.dtype)
    )
    cfg = RolloutConfig(
        tasks_per_step=4,
        group_size=group_size,
        max_turns=4,
        max_action_tokens=12,
        max_total_tokens=400,
    )
    return env, policy, cfg, env.sample_tasks(cfg.tasks_per_step, random.Random(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_head_scores_as_the_logits_on_the_gpu(dtype):
    """optim.fused_head on CUDA: a 32k-entry vocabulary in chunks (4 of them at
    1,024 tokens), log-probs, entropies and every gradient as the model's logits
    give them, to float32 or bf16 rounding."""
    import copy

    import trainer.head
    from trainer.policy import Policy

    words = [f"w{i}" for i in range(32000)]
    torch.manual_seed(0)
    fused = Policy.build(ModelConfig(size="tiny", device="cuda"), words)
    fused = fused.to(dtype=dtype)
    unfused = copy.deepcopy(fused)
    unfused.fused_head = False
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 32000, (16, 64), generator=g).cuda()
    mask = torch.ones_like(ids)
    chunk = trainer.head.CHUNK_BYTES
    trainer.head.CHUNK_BYTES = 4 * 32003 * 256  # 256 tokens a chunk
    try:
        out = []
        for policy in (unfused, fused):
            policy.zero_grad(set_to_none=True)
            st = policy.token_stats(ids, mask, with_entropy=True, entropy_grad=True)
            (st.logprobs.sum() + 0.1 * st.entropy.sum()).backward()
            grads = {n: p.grad.float() for n, p in policy.named_parameters()}
            out.append((st.logprobs.detach(), st.entropy.detach(), grads))
    finally:
        trainer.head.CHUNK_BYTES = chunk
    (lp0, ent0, g0), (lp1, ent1, g1) = out
    rel = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(lp1, lp0, rtol=rel, atol=rel * float(lp0.abs().max()))
    torch.testing.assert_close(ent1, ent0, rtol=rel, atol=rel * float(ent0.abs().max()))
    for name in g0:
        scale = float(g0[name].abs().max()) or 1.0
        assert float((g0[name] - g1[name]).abs().max()) <= 4 * rel * scale, name


@pytest.mark.parametrize("fused", [False, True])
def test_master_weights_step_bf16_weights_on_the_gpu_as_float32_adamw(fused):
    """MasterAdamW's float32 copies on CUDA (foreach and fused kernels) follow a
    float32 AdamW fed the bf16 model's gradients; the weights are them rounded."""
    from trainer.optimizer import MasterAdamW

    gen = torch.Generator("cuda").manual_seed(0)
    shapes = [(512, 256), (256,)]
    low = [
        (torch.randn(s, device="cuda", generator=gen) * 0.02)
        .bfloat16()
        .requires_grad_()
        for s in shapes
    ]
    ref = [p.detach().float().requires_grad_() for p in low]
    ours = MasterAdamW(low, lr=1e-6, fused=fused)
    theirs = torch.optim.AdamW(ref, lr=1e-6, fused=fused)
    for _ in range(5):
        for p, r in zip(low, ref, strict=True):
            p.grad = torch.randn(p.shape, device="cuda", generator=gen).bfloat16()
            r.grad = p.grad.float()
        ours.step()
        theirs.step()
    for p, r in zip(low, ref, strict=True):
        master = ours.state[p]["master"]
        torch.testing.assert_close(master, r.detach(), rtol=0, atol=1e-8)
        assert torch.equal(p.detach(), master.bfloat16())
        assert (master != p.detach().float()).float().mean() > 0.5  # kept apart
