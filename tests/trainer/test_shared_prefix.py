"""Shared prefixes in the continuous engine's slot rows (issue 24): a GRPO group's
rows begin from one prompt, kept once (``SlotCache.share``) rather than copied to
each row, and attention reads it once for all of them. The episodes are the ones
the copied layout (and a sequential sampler) gives; the buffers hold the prompt
once; a prefix is freed with the last row that shares it."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from test_continuous_engine import (
    _assert_same_episodes,
    _cfg,
    _dataset_env,
    _play,
    _sequential,
    _stopping,
    swarm,  # noqa: F401, F811  (the fixture)
)

from trainer.config import ModelConfig
from trainer.engines import shared_prefix
from trainer.engines.continuous import SHARED_PREFIX, ContinuousEngine, SlotRun
from trainer.engines.slots import SlotCache, SlotPrefix, slot_attention
from trainer.policy import Policy

CPU, F32 = torch.device("cpu"), torch.float32


@pytest.fixture(params=["fused", "products"])
def lse_kernel(request, monkeypatch):
    """The CPU's fused kernel, and the products an accelerator computes."""
    if request.param == "products":
        monkeypatch.setattr(shared_prefix, "_fused_lse", lambda q: False)
    return request.param


def _filled(cache: SlotCache, layers: int, heads: int, dim: int, g) -> None:
    """Random keys and values in every filled column of ``cache``'s rows."""
    cols = cache.capacity
    cache.keys = [
        torch.randn(cache.rows, heads, cols, dim, generator=g) for _ in range(layers)
    ]
    cache.values = [
        torch.randn(cache.rows, heads, cols, dim, generator=g) for _ in range(layers)
    ]


def test_attention_over_a_shared_prefix_is_attention_over_the_whole_context(lse_kernel):
    """Rows 0 and 2 share prefix row 1 (5 tokens), row 1 prefix row 0 (3 tokens),
    row 3 none; a decode step in which row 2 rejoins with three tokens (a group
    of queries) and row 3 has nothing to do: every query's output is attention
    over its prefix's keys followed by its row's own, 4 query heads sharing 2
    key/value heads, in either layer."""
    g = torch.Generator().manual_seed(0)
    prefix = SlotCache(2, capacity=8, headroom=False)
    prefix.length = [3, 5]
    cache = SlotCache(4, capacity=8)
    cache.prefix = prefix
    cache.share(1, [0, 2])
    cache.share(0, [1])
    cache.length[0] += 2  # own tokens already there
    cache.length[1] += 1
    cache.length[3] = 4  # no prefix: all its own
    for c in (prefix, cache):
        _filled(c, 2, 2, 8, g)
    args = cache.step({0: 7, 1: 7}, {2: [4, 5, 6]}, 0, CPU, F32)
    assert isinstance(args["slot_prefix"], SlotPrefix)
    n = args["input_ids"].shape[0]  # 4 rows, 2 more queries of row 2's group
    assert n == 6
    query = torch.randn(n, 4, 1, 8, generator=g)
    for layer in (0, 1):
        got, _ = slot_attention(
            None,
            query,
            cache.keys[layer][:, :, : cache._width],
            cache.values[layer][:, :, : cache._width],
            args["attention_mask"],
            scaling=0.3,
            slot_groups=args["slot_groups"],
            slot_prefix=args["slot_prefix"],
            layer=layer,
        )
        owner = [0, 1, 2, 3, 2, 2]
        positions = args["position_ids"][:, 0].tolist()
        for i, r in enumerate(owner):
            if r == 3:
                continue  # a blank query: its output is thrown away
            b = cache.base[r]
            own = positions[i] - cache.offset[r] + 1  # the columns it sees
            keys = [cache.keys[layer][r, :, :own]]
            values = [cache.values[layer][r, :, :own]]
            if b >= 0:
                n_pre = prefix.length[b]
                keys.insert(0, prefix.keys[layer][b, :, :n_pre])
                values.insert(0, prefix.values[layer][b, :, :n_pre])
            want = F.scaled_dot_product_attention(
                query[i : i + 1],
                torch.cat(keys, 1)[None].repeat_interleave(2, dim=1),
                torch.cat(values, 1)[None].repeat_interleave(2, dim=1),
                scale=0.3,
            )
            assert torch.allclose(got[i], want.transpose(1, 2)[0], atol=1e-5), (i, r)


def test_a_prefix_is_freed_with_the_last_row_that_shares_it():
    prefix = SlotCache(1, capacity=4, headroom=False)
    prefix.length = [3]
    cache = SlotCache(3)
    cache.prefix = prefix
    cache.share(0, [0, 2])
    assert cache.length == [3, 0, 3] and cache.offset == [3, 0, 3]
    cache.move(2, 1)  # compaction: row 2's episode moves to row 1
    assert cache.base == [0, 0, -1] and cache.sharing == {0: 2}
    cache.clear(0)
    assert prefix.length == [3] and cache.sharing == {0: 1}
    cache.clear(1)
    assert prefix.length == [0] and cache.sharing == {}


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "model"])
@pytest.mark.parametrize("slots_", [None, 4])
def test_shared_prompts_play_the_copied_layouts_episodes(
    swarm,  # noqa: F811
    lse_kernel,
    slots_,
    lean,
):
    """Every group's prompt kept once (``shared_prefix=1``), with every slot in
    use or four (new episodes then take freed rows and prefix rows), through the
    lean forward or the model's own: the same tokens, log-probs to float
    rounding, as the copied layout, which plays the sequential sampler's
    (test_continuous_engine)."""
    env, policy = swarm
    cfg = _cfg(tasks_per_step=3, group_size=3)
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(3))
    kw = {"slots": slots_, "lean": lean}
    shared = _play(policy, env, tasks, cfg, 2, shared_prefix=1, **kw)
    copied = _play(policy, env, tasks, cfg, 2, shared_prefix=None, **kw)
    _assert_same_episodes(shared, copied)
    assert min(ro.num_turns for ro in shared) > 1  # rows rejoin after tool calls
    assert len({len(ro.token_ids) for ro in shared}) > 1  # ragged rows


class _Spy(SlotRun):
    """Keeps each run's cache to look at after the run."""

    caches: list[SlotCache] = []

    def __init__(self, *args) -> None:
        super().__init__(*args)
        _Spy.caches.append(self.cache)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_a_chat_models_prompt_is_held_once_per_group(tmp_path, monkeypatch, kv_heads):
    """A chat model directory's templated prompts (grouped-query attention too):
    the sequential sampler's episodes, each group's prompt in one prefix row,
    the rows holding only what follows it, every prefix freed at the end."""
    from tests.trainer.chatmodel import build_chat_model
    from trainer.engines import continuous

    monkeypatch.setattr(continuous, "SlotRun", _Spy)
    _Spy.caches = []
    env = _dataset_env(tmp_path)
    path = build_chat_model(tmp_path / "models", kv_heads=kv_heads)
    torch.manual_seed(0)
    policy = _stopping(Policy.build(ModelConfig(path=str(path)), env.vocabulary()))
    cfg = _cfg(max_turns=2, max_action_tokens=12, max_total_tokens=1000)
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(1))
    got = _play(policy, env, tasks, cfg, 5, shared_prefix=1)
    _assert_same_episodes(got, _sequential(policy, env, tasks, cfg, 5))
    cache = _Spy.caches[-1]
    prompts = {tuple(ro.segments[0].token_ids) for ro in got}
    assert cache.prefix.rows == len(prompts) == cfg.tasks_per_step
    assert cache.sharing == {} and cache.prefix.length == [0] * len(prompts)
    # The rows' buffers hold no prompt: fewer columns than the shortest prompt
    # and the longest own part together.
    shortest = min(map(len, prompts))
    assert cache.capacity < shortest
    copied_run = _play(policy, env, tasks, cfg, 5, shared_prefix=None)
    _assert_same_episodes(got, copied_run)
    assert _Spy.caches[-1].nbytes() > 2 * cache.nbytes()


def test_auto_shares_prompts_on_an_accelerator_and_copies_them_on_the_cpu():
    class _Policy:
        device = "cpu"

    engine = ContinuousEngine.__new__(ContinuousEngine)
    engine.policy = _Policy()
    assert engine.shared_prefix == "auto" and engine._shared_prefix() is None
    engine.policy.device = torch.device("cuda", 0)  # named, not used
    assert engine._shared_prefix() == SHARED_PREFIX
    engine.shared_prefix = 8
    assert engine._shared_prefix() == 8


def test_the_prefix_cache_grows_its_rows_and_columns_only_as_prompts_need():
    """Rows added as groups arrive, columns exactly a prompt's and the scratch
    one: a prompt no longer than the longest so far is not copied into new
    buffers; a longer one grows them, keeping what the others hold."""
    prefix = SlotCache(0, capacity=2, headroom=False)
    prefix.add_rows(2)
    prefix.feed([0, 1], [[1, 2, 3], [4, 5]], 0, CPU, F32)
    prefix.update(torch.ones(2, 1, 3, 2), torch.ones(2, 1, 3, 2), 0)
    assert prefix.capacity == 4  # three columns and the scratch one
    prefix.clear(1)
    made = prefix.keys[0]
    prefix.feed([1], [[6, 7, 8]], 0, CPU, F32)
    prefix.update(torch.full((1, 1, 3, 2), 2.0), torch.ones(1, 1, 3, 2), 0)
    assert prefix.keys[0] is made
    prefix.add_rows(1)
    prefix.feed([2], [[9] * 5], 0, CPU, F32)
    prefix.update(torch.full((1, 1, 5, 2), 3.0), torch.ones(1, 1, 5, 2), 0)
    keys = prefix.keys[0]
    assert keys.shape[0] == 3 and prefix.capacity == 6
    assert (keys[0, :, :3] == 1).all() and (keys[1, :, :3] == 2).all()
    assert (keys[2, :, :5] == 3).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_attention_in_half_precision_is_as_close_as_the_attention_kernels(
    lse_kernel, dtype
):
    """In bf16 and fp16 the scores and softmax are kept in float32, as attention
    kernels keep them: the two parts' attention is no further from the exact one
    than scaled_dot_product_attention is (scores rounded to bf16 first erred ~20x
    more at scores of spread 9)."""
    from trainer.engines.shared_prefix import attention_lse

    g = torch.Generator().manual_seed(0)
    n, heads, kv, dim, width = 8, 8, 2, 128, 600

    def draw(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    q, k = draw(n, heads, 1, dim, scale=3.0), draw(n, kv, width, dim, scale=3.0)
    v = draw(n, kv, width, dim)
    mask = torch.zeros(n, 1, 1, width, dtype=dtype)
    exact = F.scaled_dot_product_attention(
        q.double(),
        k.double().repeat_interleave(heads // kv, 1),
        v.double().repeat_interleave(heads // kv, 1),
        scale=dim**-0.5,
    )
    kernel = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=dim**-0.5, enable_gqa=True
    )
    got, _ = attention_lse(q, k, v, mask, dim**-0.5)
    err = float((got.to(dtype).double() - exact).abs().max())
    assert err <= 1.5 * float((kernel.double() - exact).abs().max())


def test_prefixes_still_shared_move_to_the_first_rows():
    """Once groups have ended, the prompts still in use are moved down (their
    keys and values with them) and the rows point at their new places, so that
    attention reads them as a slice of the buffers."""
    prefix = SlotCache(3, capacity=4, headroom=False)
    cache = SlotCache(4)
    cache.prefix = prefix
    prefix.feed([0, 1, 2], [[1, 2], [3, 4, 5], [6]], 0, CPU, F32)
    marks = torch.tensor([1.0, 2.0, 3.0])[:, None, None, None].expand(3, 1, 3, 2)
    prefix.update(marks.clone(), marks.clone(), 0)
    cache.share(0, [0])
    cache.share(1, [1, 2])
    cache.share(2, [3])
    cache.clear(0)  # prompt 0's group is over
    assert prefix.length == [0, 3, 1] and sorted(cache.sharing) == [1, 2]
    args = cache.step({1: 9, 2: 9, 3: 9}, {}, 0, CPU, F32)
    assert args["slot_prefix"].rows is not None  # rows 1 and 2: gathered
    cache.compact_prefixes()
    assert cache.base == [-1, 0, 0, 1] and cache.sharing == {0: 2, 1: 1}
    assert prefix.length == [3, 1, 0]
    assert (prefix.keys[0][0, :, :3] == 2).all() and (
        prefix.keys[0][1, :, :1] == 3
    ).all()
    args = cache.step({1: 9, 2: 9, 3: 9}, {}, 0, CPU, F32)
    assert args["slot_prefix"].rows is None  # the first two: a slice
    assert cache.offset == [0, 3, 3, 1]  # the rows' own columns did not move


def test_episodes_admitted_later_share_their_groups_prompt_while_it_is_held(
    swarm,  # noqa: F811
    monkeypatch,
):
    """Two slots, a group of three: episodes 0 and 1 begin together (their prompt
    fed once), episode 0 ends first and episode 2 takes its slot while episode 1
    still holds the prompt: it shares it, with no forward of its own. Episode 3
    (another prompt) then comes alone: its prompt is fed. The episodes are the
    copied layout's."""
    from test_continuous_engine import _Script

    from trainer.engines.continuous import episode_generators

    policy = swarm[1]
    prompts = {0: [policy.bos_id] + [5] * 6, 1: [policy.bos_id] + [6] * 6}

    class Script(_Script):
        def begin(self, e):
            self.tokens = getattr(self, "tokens", {})
            return prompts[0 if e < 3 else 1], self.budgets[e]

        def act(self, e, tokens, logprobs):
            self.tokens[e] = list(tokens)
            return super().act(e, tokens, logprobs)

    fed: list[list[list[int]]] = []
    real = SlotCache.feed

    def spy(self, rows, tokens, *a, **kw):
        if not self.headroom:  # the prefix cache
            fed.append([list(t) for t in tokens])
        return real(self, rows, tokens, *a, **kw)

    monkeypatch.setattr(SlotCache, "feed", spy)
    saved = policy.stop_ids
    policy.stop_ids = [policy.model.config.vocab_size]  # never sampled: budgets rule
    runs = {}
    try:
        for shared in (1, None):
            script = Script(policy, turns=[1, 1, 1, 1], budgets=[2, 9, 4, 3])
            engine = policy.use_engine("continuous")
            engine.shared_prefix = shared
            engine.run_episodes(
                script,
                episode_generators(torch.Generator().manual_seed(0), 4),
                temperature=1.0,
                top_p=1.0,
                slots=2,
            )
            runs[shared] = script
    finally:
        policy.stop_ids = saved
    assert fed == [[prompts[0]], [prompts[1]]]  # each prompt fed once
    assert runs[1].order == runs[None].order == [0, 2, 3, 1]
    assert runs[1].tokens == runs[None].tokens
