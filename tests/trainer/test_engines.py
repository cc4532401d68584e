"""Rollout engines (issue 24): the eager engine samples what the reference loop
samples, row by row, while finished rows leave the batch and the host reads the
device once per chunk of steps; ``rollout.engine`` picks an engine by name."""

from __future__ import annotations

import pytest
import torch
from chatmodel import build_chat_model
from engine_batches import ragged_batch
from option_registry import covers
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from trainer.config import ModelConfig, TrainConfig
from trainer.engines import ENGINES, build_engine
from trainer.engines.eager import EagerEngine
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.policy import Policy

WORDS = ["calc", "answer", "+", "=", *map(str, range(10))]


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return Policy.build(ModelConfig(size="tiny"), WORDS, temperature=0.7)


@pytest.fixture(scope="module")
def chat_lora(tmp_path_factory) -> Policy:
    path = build_chat_model(tmp_path_factory.mktemp("models"))
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    torch.manual_seed(0)
    p = Policy.build(ModelConfig(path=str(path), lora=lora), [])
    with torch.no_grad():  # adapters that change the logits (peft starts B at 0)
        for name, param in p.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return p


def _batch(policy: Policy, seed: int, shared: bool):
    return ragged_batch(policy, seed, shared)


def _both(policy, contexts, budgets, seed, every, reserve_cache=True, **kw):
    """(reference, eager) generations and their generators after sampling."""
    out = []
    for name in ("reference", "eager"):
        engine = build_engine(name, policy)
        if name == "eager":
            engine.sync_every = every
            engine.reserve_cache = reserve_cache
        gen = torch.Generator().manual_seed(seed)
        g = engine.generate(contexts, budgets, generator=gen, with_logprobs=True, **kw)
        out.append((g, gen.get_state()))
    return out


def _assert_same(ref, eager):
    (a, state_a), (b, state_b) = ref, eager
    assert b.tokens == a.tokens
    # The generator is left where the reference loop leaves it: the next call
    # (the next turn, the next step) draws the same numbers.
    assert torch.equal(state_a, state_b)
    # Log-probs agree to float32 rounding, not to the bit: the same rows computed
    # in a smaller batch round differently inside BLAS (gemv for one row, blocked
    # gemm for several), as a row's numbers in the reference loop already depend
    # on how many neighbours it has.
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        assert len(x) == len(y)
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-5, rtol=0)


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": 0.7, "top_p": 1.0},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 0.0, "top_p": 1.0},  # greedy: nothing drawn
    ],
)
def test_eager_samples_the_reference_loops_tokens_and_logprobs_row_by_row(
    policy, kw, every
):
    for seed in range(3):
        contexts, budgets = _batch(policy, seed, shared=seed % 2 == 0)
        _assert_same(*_both(policy, contexts, budgets, seed, every, **kw))


def test_without_reserved_room_the_eager_engine_samples_the_same(policy, monkeypatch):
    # reserve_cache False: transformers' concatenating cache (the A/B of
    # bench/gpu_bench.py --no-reserve); the reserved buffers are really skipped.
    from trainer.engines import eager

    made = []
    monkeypatch.setattr(eager, "reserve", lambda *a: made.append(a))
    kw = {"temperature": 0.7, "top_p": 1.0}
    for seed in range(3):
        contexts, budgets = _batch(policy, seed, shared=seed % 2 == 0)
        _assert_same(*_both(policy, contexts, budgets, seed, 2, False, **kw))
    assert made == []


def test_a_chat_model_with_lora_samples_the_same_through_either_engine(chat_lora):
    p = chat_lora
    for seed in range(4):
        contexts, budgets = _batch(p, seed, shared=seed % 2 == 0)
        kw = {"temperature": 1.0, "top_p": 0.95}
        _assert_same(*_both(p, contexts, budgets, seed, 4, **kw))


class _BatchSizes:
    """Records the batch size of every decode forward (one new token per row)."""

    def __init__(self, policy: Policy) -> None:
        self.sizes: list[int] = []
        self.handle = policy.model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        ids = kwargs["input_ids"]
        if ids.shape[1] == 1:
            self.sizes.append(ids.shape[0])


def test_finished_rows_leave_the_batch(policy):
    """Budgets 1..8, one row each: every step computes only the rows still going
    (the reference loop ran all 8 rows for all 7 decode steps)."""
    budgets = list(range(1, 9))
    contexts = [[policy.bos_id, 5 + i % 3] for i in range(8)]
    engine = build_engine("eager", policy)
    saved = policy.stop_ids
    policy.stop_ids = [policy.model.config.vocab_size]  # never sampled: budgets rule
    seen = _BatchSizes(policy)
    try:
        engine.generate(
            contexts,
            budgets,
            temperature=1.0,
            top_p=1.0,
            generator=torch.Generator().manual_seed(0),
            with_logprobs=True,
        )
    finally:
        seen.handle.remove()
        policy.stop_ids = saved
    assert seen.sizes == [7, 6, 5, 4, 3, 2, 1]


class _HostReads(TorchFunctionMode):
    """Counts the decode loop's reads of tensor values into Python (each a device
    sync on a GPU). Reads inside the model's forward are the model's own
    (transformers' mask check asks whether the mask is all ones, once per forward;
    the lean decode steps build their masks without it: the next test)."""

    READS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__"}

    def __init__(self, model) -> None:
        super().__init__()
        self.count = 0
        self.inside = False
        self.hooks = [
            model.register_forward_pre_hook(lambda *a: self._enter(True)),
            model.register_forward_hook(lambda *a: self._enter(False)),
        ]

    def _enter(self, inside: bool) -> None:
        self.inside = inside

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.inside and getattr(func, "__name__", "") in self.READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _reads(policy: Policy, rows: int, every: int) -> int:
    engine = build_engine("eager", policy)
    engine.sync_every = every
    reads = _HostReads(policy.model)
    try:
        with reads:
            engine.generate(
                [[policy.bos_id, 5]] * rows,
                [32] * rows,
                temperature=1.0,
                top_p=1.0,
                generator=torch.Generator().manual_seed(0),
                with_logprobs=True,
            )
    finally:
        for hook in reads.hooks:
            hook.remove()
    return reads.count


def test_the_host_reads_the_device_once_per_chunk_whatever_the_batch_size(policy):
    saved = policy.stop_ids
    policy.stop_ids = [policy.model.config.vocab_size]  # every row runs 32 tokens
    try:
        small, large = _reads(policy, 4, every=8), _reads(policy, 32, every=8)
    finally:
        policy.stop_ids = saved
    assert small == large
    # 32 steps in chunks of 8: two reads per chunk (any row ended? any left?), and
    # the tokens, lengths and log-probs read back once at the end.
    assert large <= 2 * (32 // 8) + 3


class _ScalarReads(TorchDispatchMode):
    """Counts every read of one tensor value into Python, wherever it happens (our
    loop, transformers' mask code, a forward): ``bool()``, ``int()`` and ``item()``
    all come down to ``aten._local_scalar_dense``, a device sync on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten._local_scalar_dense:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_no_code_reads_the_device_every_token_the_masks_neither(policy):
    """transformers' causal mask asks whether the padding mask is all ones (a
    scalar read) every forward it makes; the eager engine's decode steps build
    their one-query mask themselves, so a generation's scalar reads are its
    chunks' and its prefill's, not one a token."""
    saved = policy.stop_ids
    policy.stop_ids = [policy.model.config.vocab_size]  # every row runs 32 tokens
    counts = []
    # The lean forward's one check against the model (its own reads) first.
    assert build_engine("eager", policy)._lean(over_cache=True) is not None
    try:
        for rows in (4, 32):
            engine = build_engine("eager", policy)
            engine.sync_every = 8
            contexts = [[policy.bos_id] + [5] * (1 + i % 3) for i in range(rows)]
            reads = _ScalarReads()
            with reads:
                engine.generate(
                    contexts,  # left-padded: the decode masks have padding
                    [32] * rows,
                    temperature=1.0,
                    top_p=1.0,
                    generator=torch.Generator().manual_seed(0),
                    with_logprobs=True,
                )
            counts.append(reads.count)
    finally:
        policy.stop_ids = saved
    assert counts[0] == counts[1]
    assert counts[1] <= 32 // 8 + 4, counts  # vs 32 + 5 with transformers' mask


def test_rollout_engine_names_a_registered_engine():
    assert TrainConfig.model_validate({}).rollout.engine == "eager"
    cfg = TrainConfig.model_validate({"rollout": {"engine": "reference"}})
    assert cfg.rollout.engine == "reference"
    with pytest.raises(ValueError) as err:
        TrainConfig.model_validate({"rollout": {"engine": "vllm"}})
    assert "rollout.engine" in str(err.value)
    assert (
        "unknown rollout engine 'vllm' (known: compiled, continuous, eager, reference)"
        in str(err.value)
    )


class _Counting(EagerEngine):
    """A plugin's engine: the eager one, counting the calls an external engine
    (vLLM, SGLang) needs from the loop."""

    calls: list[str] = []

    def generate(self, *args, **kwargs):
        assert not self.asleep
        self.calls.append("generate")
        return super().generate(*args, **kwargs)

    def load_weights(self) -> None:
        super().load_weights()
        self.calls.append("load_weights")

    def sleep(self) -> None:
        super().sleep()
        self.calls.append("sleep")

    def wake(self) -> None:
        super().wake()
        self.calls.append("wake")


def _trajectories(engine: str, reward_fn) -> list[list[int]]:
    cfg = TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "rollout": {"tasks_per_step": 2, "group_size": 3, "engine": engine},
        }
    )
    sink = ListSink()
    train(cfg, make_env("calc", seed=0), reward_fn, sink)
    return [
        [t for seg in ev["segments"] for t in seg["token_ids"]]
        for ev in sink.of_type("trajectory")
    ]


@pytest.mark.slow
@covers("rollout.engine")
def test_the_loop_samples_through_the_configured_engine_and_tells_it_of_updates(
    reward_fn,
):
    if "counting" not in ENGINES:
        ENGINES.register("counting")(_Counting)
    _Counting.calls.clear()
    counted = _trajectories("counting", reward_fn)
    calls = _Counting.calls
    # Per step: woken, one generate per turn, put to sleep, new weights loaded.
    assert calls[0] == "wake" and calls.count("wake") == 2
    assert calls.count("sleep") == 2 and calls.count("load_weights") == 2
    first = calls[: calls.index("load_weights") + 1]
    assert first[-2:] == ["sleep", "load_weights"] and "generate" in first
    # The eager and the reference engine train on the same trajectories.
    assert counted == _trajectories("reference", reward_fn)
