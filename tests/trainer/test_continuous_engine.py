"""Continuous batching across turns (issue 24, item 3): episodes rejoin the decode
batch as their environment steps return, keep their KV cache across turns, and
sample from per-episode random streams, so each episode gets exactly what a
sequential sampler (one episode at a time, the eager engine) gives it."""

from __future__ import annotations

import json
import random
import threading

import pytest
import torch
from option_registry import covers

from trainer.config import ModelConfig, RolloutConfig, TrainConfig
from trainer.engines.continuous import episode_generators
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.policy import Policy
from trainer.rollout import play
from trainer.stopping import Stopped


def _dataset_env(tmp_path):
    rng = random.Random(0)
    rows = []
    for i in range(8):
        a, b = rng.randint(10, 99), rng.randint(2, 9)
        rows.append({"prompt": f"what is {a} * {b} ?", "answer": str(a * b), "id": i})
    path = tmp_path / "mul.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return make_env("dataset", {"path": str(path), "tools": ["calculator"]})


def _stopping(policy: Policy, *words: str) -> Policy:
    """Random weights almost never write a stop token: lift its logits (and those
    of ``words``) so that actions end after a few tokens, and episodes are ragged."""
    lift = torch.zeros(policy.model.config.vocab_size)
    lift[list(policy.stop_ids)] = 3.0
    lift[[policy.encode(w)[0] for w in words]] = 3.0
    policy.model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: out + lift.to(out.dtype)
    )
    return policy


@pytest.fixture(scope="module")
def swarm():
    env = make_env("swarm", seed=0)
    torch.manual_seed(0)
    policy = Policy.build(ModelConfig(size="tiny"), env.vocabulary(), temperature=0.9)
    return env, _stopping(policy)


def _cfg(**kw) -> RolloutConfig:
    base = {
        "tasks_per_step": 2,
        "group_size": 3,
        "max_turns": 4,
        "max_action_tokens": 10,
        "max_total_tokens": 400,
    }
    return RolloutConfig(**{**base, **kw})


def _play(policy, env, tasks, cfg, seed, engine="continuous", **engine_kw):
    eng = policy.use_engine(engine)
    for k, v in engine_kw.items():
        setattr(eng, k, v)
    return play(policy, env, tasks, cfg, generator=torch.Generator().manual_seed(seed))


def _sequential(policy, env, tasks, cfg, seed):
    """Each episode alone, in order, through the eager engine, drawing from the
    generator the continuous rollout gives that episode."""
    gens = episode_generators(
        torch.Generator().manual_seed(seed), len(tasks) * cfg.group_size
    )
    policy.use_engine("eager")
    one = cfg.model_copy(update={"group_size": 1})
    out = []
    for task in tasks:
        for _ in range(cfg.group_size):
            out.append(play(policy, env, [task], one, generator=gens[len(out)])[0])
    return out


def _assert_same_episodes(a_list, b_list):
    assert len(a_list) == len(b_list)
    for a, b in zip(a_list, b_list, strict=True):
        assert [(s.turn, s.kind, s.token_ids, s.mask) for s in a.segments] == [
            (s.turn, s.kind, s.token_ids, s.mask) for s in b.segments
        ]
        assert a.truncated == b.truncated
        assert a.episode.facts == b.episode.facts
        for x, y in zip(a.segments, b.segments, strict=True):
            if x.logprobs is not None:
                # To float32 rounding: a row's numbers depend on its batch's size.
                assert torch.allclose(
                    torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5
                )


@pytest.mark.parametrize(
    "kw", [{"temperature": 0.9, "top_p": 1.0}, {"temperature": 1.3, "top_p": 0.8}]
)
def test_each_episode_gets_what_a_sequential_sampler_gives_it(swarm, kw):
    env, policy = swarm
    cfg = _cfg(**kw)
    for seed in range(2):
        tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(seed))
        got = _play(policy, env, tasks, cfg, seed)
        assert sum(ro.num_turns for ro in got) > len(got)  # multi-turn episodes
        _assert_same_episodes(got, _sequential(policy, env, tasks, cfg, seed))


def test_dataset_with_the_calculator_matches_the_sequential_sampler(tmp_path):
    env = _dataset_env(tmp_path)
    torch.manual_seed(0)
    policy = Policy.build(ModelConfig(size="tiny"), env.vocabulary())
    policy = _stopping(policy, "calculator")  # actions that call the tool
    cfg = _cfg(max_turns=3, max_action_tokens=8, max_total_tokens=40)
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(3))
    got = _play(policy, env, tasks, cfg, 7)
    assert sum(ro.num_turns for ro in got) > len(got)  # tool calls answered
    assert any(ro.truncated for ro in got)  # and the token budget reached
    _assert_same_episodes(got, _sequential(policy, env, tasks, cfg, 7))


@pytest.mark.parametrize("slots,workers", [(1, 0), (2, 4), (5, 1)])
def test_an_episode_does_not_depend_on_what_else_is_in_the_batch(swarm, slots, workers):
    """Slot counts change which episodes share each decode step, and threads
    change when each observation comes back; no episode's tokens change."""
    env, policy = swarm
    cfg = _cfg()
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(11))
    whole = _play(policy, env, tasks, cfg, 3)
    assert len({len(ro.token_ids) for ro in whole}) > 1  # ragged episodes
    narrow = _play(policy, env, tasks, cfg, 3, slots=slots, workers=workers)
    for a, b in zip(narrow, whole, strict=True):
        assert [s.token_ids for s in a.segments] == [s.token_ids for s in b.segments]


def test_episode_generators_move_to_the_logits_device_unless_told_not_to(
    swarm, monkeypatch
):
    """On a GPU each episode's noise is drawn there (``episodes.on_device``, run
    on CUDA by tests/trainer/test_gpu.py); on the CPU the host generators stay,
    and ``noise_on_device = False`` keeps them anywhere."""
    from trainer.engines import continuous

    env, policy = swarm
    seen: list[str] = []
    real = continuous.on_device

    def spy(generators, device):
        seen.append(str(device))
        return real(generators, device)

    monkeypatch.setattr(continuous, "on_device", spy)
    cfg = _cfg()
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(4))
    moved = _play(policy, env, tasks, cfg, 2)
    kept = _play(policy, env, tasks, cfg, 2, noise_on_device=False)
    assert seen == [str(policy.device)]  # asked once, for the policy's device
    _assert_same_episodes(moved, kept)  # the CPU's generators are the host's
    gens = episode_generators(torch.Generator().manual_seed(0), 3)
    assert real(gens, "cpu") == gens


def test_greedy_decoding_plays_exactly_the_lock_step_loops_episodes(swarm):
    """Temperature 0 draws nothing: the two schedules must agree token for token."""
    env, policy = swarm
    cfg = _cfg().model_copy(update={"temperature": 0.0})  # as evaluation decodes
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(5))
    got = _play(policy, env, tasks, cfg, 0)
    _assert_same_episodes(got, _play(policy, env, tasks, cfg, 0, engine="eager"))


class _Fed:
    """Counts the tokens fed to the model (new positions the mask lets in)."""

    def __init__(self, policy: Policy) -> None:
        self.tokens = 0
        self.widths: list[int] = []
        self.handle = policy.model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        cache = kwargs.get("cache")  # slot rows: its rows are the batch's width
        if mask.dim() == 4:  # slot rows: a query is a token when it writes a
            scratch = cache.capacity - 1  # column (blank ones write the scratch one)
            self.tokens += int((cache._cols != scratch).sum())
        else:
            self.tokens += int(mask[:, -ids.shape[1] :].sum())
        self.widths.append(getattr(cache, "rows", ids.shape[0]))


def test_an_episode_keeps_its_kv_cache_across_turns(swarm):
    """Every token goes through the model once: each distinct prompt once, then
    each episode's actions and observations up to its last action's last token
    (never fed; nor is an observation after the last turn)."""
    env, policy = swarm
    cfg = _cfg()
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(2))
    fed = _Fed(policy)
    try:
        got = _play(policy, env, tasks, cfg, 1)
    finally:
        fed.handle.remove()
    prompts = {tuple(ro.segments[0].token_ids) for ro in got}
    fed_after_prompt = 0
    for ro in got:
        last = max(k for k, s in enumerate(ro.segments) if s.kind == "action")
        fed_after_prompt += sum(len(s.token_ids) for s in ro.segments[1 : last + 1]) - 1
    # The lock-step loop feeds every context again at every turn.
    assert fed.tokens == sum(map(len, prompts)) + fed_after_prompt


class _Script:
    """A driver: episode e takes ``turns[e]`` actions of ``budget[e]`` tokens each,
    observations of two tokens; records the order of actions and their threads."""

    def __init__(self, policy, turns, budgets):
        self.policy, self.turns, self.budgets = policy, turns, budgets
        self.done = [0] * len(turns)
        self.order: list[int] = []
        self.threads: list[str] = []

    def begin(self, e):
        return [self.policy.bos_id, 5 + e], self.budgets[e]

    def act(self, e, tokens, logprobs):
        assert len(tokens) == len(logprobs) == self.budgets[e]
        self.order.append(e)

        def work():
            self.threads.append(threading.current_thread().name)
            return e

        return work

    def resume(self, e, outcome):
        assert outcome == e
        self.done[e] += 1
        return None if self.done[e] == self.turns[e] else ([6, 7], self.budgets[e])


def _script(policy, turns, budgets, **kw):
    saved = policy.stop_ids
    policy.stop_ids = [policy.model.config.vocab_size]  # never sampled: budgets rule
    script = _Script(policy, turns, budgets)
    fed = _Fed(policy)
    try:
        policy.use_engine("continuous").run_episodes(
            script,
            episode_generators(torch.Generator().manual_seed(0), len(turns)),
            temperature=1.0,
            top_p=1.0,
            **kw,
        )
    finally:
        fed.handle.remove()
        policy.stop_ids = saved
    return script, fed


def test_a_returning_episode_rejoins_while_others_still_generate(swarm):
    """Episode 0 plays three 2-token turns inside episode 1's one 8-token turn (the
    lock-step loop would wait for episode 1 before episode 0's second turn)."""
    script, _ = _script(swarm[1], turns=[3, 1], budgets=[2, 8], workers=0)
    assert script.order == [0, 0, 0, 1]


def test_new_episodes_fill_free_slots(swarm):
    script, fed = _script(swarm[1], turns=[1, 2, 1, 1], budgets=[3, 2, 5, 1], slots=2)
    assert max(fed.widths) <= 2
    assert sorted(script.order) == [0, 1, 1, 2, 3]
    assert script.order.index(3) > script.order.index(0)  # waited for a slot


def test_environment_steps_run_off_the_decode_thread(swarm):
    script, _ = _script(swarm[1], turns=[2, 2, 2], budgets=[2, 3, 4], workers=3)
    assert len(script.threads) == 6
    assert all(name.startswith("env-step") for name in script.threads)
    script, _ = _script(swarm[1], turns=[2, 2], budgets=[2, 3], workers=0)
    assert set(script.threads) == {threading.current_thread().name}


def test_an_environment_not_marked_thread_safe_steps_on_the_decode_thread(swarm):
    env, policy = swarm
    seen: list[str] = []
    start = env.start

    class Mark:
        def __init__(self, session):
            self.session = session

        def step(self, action):
            seen.append(threading.current_thread().name)
            return self.session.step(action)

        def episode(self, truncated):
            return self.session.episode(truncated=truncated)

    env.start = lambda task: Mark(start(task))
    try:
        cfg = _cfg()
        tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(0))
        _play(policy, env, tasks, cfg, 0, workers=2)
        assert seen and all(n.startswith("env-step") for n in seen)
        seen.clear()
        env.steps_in_threads = False  # as a plugin's environment is by default
        _play(policy, env, tasks, cfg, 0, workers=2)
        assert set(seen) == {threading.current_thread().name}
    finally:
        del env.start
        del env.steps_in_threads


def test_asked_to_stop_the_engine_stops_between_tokens(swarm):
    env, policy = swarm
    cfg = _cfg()
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(0))
    policy.stop_check = lambda: True
    try:
        with pytest.raises(Stopped):
            _play(policy, env, tasks, cfg, 0)
    finally:
        policy.stop_check = None


@covers("rollout.engine")
def test_the_loop_rolls_out_continuously_and_reproducibly(reward_fn):
    def trajectories():
        cfg = TrainConfig.model_validate(
            {
                "steps": 2,
                "env": {"name": "calc"},
                "model": {"size": "tiny"},
                "rollout": {
                    "tasks_per_step": 2,
                    "group_size": 3,
                    "engine": "continuous",
                },
            }
        )
        sink = ListSink()
        train(cfg, make_env("calc", seed=0), reward_fn, sink)
        return [
            [t for seg in ev["segments"] for t in seg["token_ids"]]
            for ev in sink.of_type("trajectory")
        ]

    first = trajectories()
    assert len(first) == 2 * 2 * 3
    assert first == trajectories()


def test_the_re_formed_batch_gives_the_same_episodes(swarm):
    """A model the slot rows do not fit keeps its episodes in a batch re-formed as
    rows leave and join: the same episodes as the sequential sampler's."""
    env, policy = swarm
    cfg = _cfg()
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(4))
    got = _play(policy, env, tasks, cfg, 2, in_place=False)
    try:
        assert sum(ro.num_turns for ro in got) > len(got)
        _assert_same_episodes(got, _sequential(policy, env, tasks, cfg, 2))
    finally:
        policy.use_engine("continuous").in_place = None


def test_slot_rows_need_full_attention_through_a_4d_mask():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    from trainer.engines.slots import supports

    def model(config, attn="sdpa"):
        config._attn_implementation = attn
        return type("M", (), {"config": config})()

    assert supports(model(LlamaConfig()))
    assert supports(model(Qwen2Config()))  # its window is off by default
    assert not supports(
        model(Qwen2Config(use_sliding_window=True, max_window_layers=0))
    )
    assert not supports(model(MistralConfig(sliding_window=4096)))
    assert not supports(model(LlamaConfig(), attn="flash_attention_2"))


def test_rows_decode_in_place_and_the_buffers_shrink_as_episodes_end(swarm):
    """A decode step writes into the slot buffers it found (no copy of the cache);
    once no episode is left to begin, rows of ended episodes are dropped."""
    policy = swarm[1]
    seen: list[tuple[int, int, int]] = []  # (rows, buffer, capacity) of each step

    def look(module, args, kwargs):
        cache = kwargs["cache"]
        if kwargs["input_ids"].shape[1] == 1 and cache.keys:
            seen.append((cache.rows, id(cache.keys[0]), cache.capacity))

    handle = policy.model.register_forward_pre_hook(look, with_kwargs=True)
    try:
        script, _ = _script(policy, turns=[1, 1, 1, 3], budgets=[2, 3, 4, 6])
    finally:
        handle.remove()
    assert sorted(script.order) == [0, 1, 2, 3, 3, 3]
    rows = [r for r, _, _ in seen]
    assert rows[0] == 4 and rows[-1] == 1 and rows == sorted(rows, reverse=True)
    same = [
        (a, b)
        for a, b in zip(seen, seen[1:], strict=False)
        if (a[0], a[2]) == (b[0], b[2])
    ]
    assert len(same) > 10 and all(a[1] == b[1] for a, b in same)


def test_grown_buffers_keep_the_rows_columns_and_hold_zeros_past_them():
    """A grown buffer keeps each row's filled columns and holds zeros past them,
    the old scratch column's leftovers (here NaN) not carried over: masked
    columns are added to, not skipped, so they must be finite."""
    from trainer.engines.slots import SlotCache

    cache = SlotCache(2, capacity=4)
    cpu, f32 = torch.device("cpu"), torch.float32
    cache.feed(None, [[1, 2], [3]], 0, cpu, f32)
    cache.update(torch.ones(2, 1, 2, 3), torch.ones(2, 1, 2, 3), 0)
    scratch = cache.capacity - 1
    for buf in (*cache.keys, *cache.values):
        buf[:, :, scratch].fill_(float("nan"))  # what a blank query wrote there
    cache.feed(None, [[4] * scratch, []], 0, cpu, f32)  # past the capacity
    assert cache.capacity > scratch + 1
    for buf in (*cache.keys, *cache.values):
        assert (buf[0, :, :2] == 1).all() and (buf[1, :, :1] == 1).all()
        assert (buf[:, :, 2:] == 0).all()  # the old scratch column among them


def test_the_first_buffers_have_room_to_decode_without_growing():
    """The first forward's buffers are made with room for as many columns again,
    so decoding after a long context does not copy them into bigger ones."""
    from trainer.engines.slots import SlotCache

    cache = SlotCache(2, capacity=4)
    cpu, f32 = torch.device("cpu"), torch.float32
    cache.feed(None, [list(range(1, 11)), [3]], 0, cpu, f32)
    cache.update(torch.ones(2, 1, 10, 3), torch.ones(2, 1, 10, 3), 0)
    made = cache.keys[0]
    assert cache.capacity >= 2 * 11
    for _ in range(5):
        cache.step({0: 7, 1: 7}, {}, 0, cpu, f32)
        cache.update(torch.ones(2, 1, 1, 3), torch.ones(2, 1, 1, 3), 0)
    assert cache.keys[0] is made


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_a_pretrained_chat_model_with_lora_plays_the_sequential_samplers_episodes(
    tmp_path, kv_heads
):
    """The slot rows under a local model directory (its own tokenizer and chat
    template) with LoRA adapters that change the logits; with grouped-query
    attention too (2 key/value heads for 4 query heads)."""
    from tests.trainer.chatmodel import build_chat_model

    env = _dataset_env(tmp_path)
    path = build_chat_model(tmp_path / "models", kv_heads=kv_heads)
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    torch.manual_seed(0)
    policy = Policy.build(ModelConfig(path=str(path), lora=lora), env.vocabulary())
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    policy = _stopping(policy)
    from trainer.engines.slots import supports

    assert supports(policy.model)  # through peft, to the base model's config
    cfg = _cfg(max_turns=2, max_action_tokens=12, max_total_tokens=1000)
    tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(1))
    got = _play(policy, env, tasks, cfg, 5)
    assert len({len(ro.token_ids) for ro in got}) > 1  # ragged rows
    _assert_same_episodes(got, _sequential(policy, env, tasks, cfg, 5))


def test_slot_attention_matches_attention_row_by_row_with_grouped_heads():
    """Each query row against its own key row, and a group's queries (an episode
    rejoining with its observation) against their row, 4 query heads sharing 2
    key/value heads: what attention over each row alone gives."""
    from trainer.engines.slots import slot_attention

    g = torch.Generator().manual_seed(0)
    rows, width, dim = 3, 7, 8
    key = torch.randn(rows, 2, width, dim, generator=g)
    value = torch.randn(rows, 2, width, dim, generator=g)
    query = torch.randn(rows + 2, 4, 1, dim, generator=g)  # two more: row 1's group
    see = torch.rand(rows + 2, 1, 1, width, generator=g) > 0.4
    see[..., 0] = True
    mask = torch.zeros(see.shape).masked_fill(~see, torch.finfo(torch.float32).min)
    module = torch.nn.Module()
    got, _ = slot_attention(
        module, query, key, value, mask, scaling=0.3, slot_groups=[(1, 3, 2)]
    )
    owner = [0, 1, 2, 1, 1]
    for i, r in enumerate(owner):
        want = torch.nn.functional.scaled_dot_product_attention(
            query[i : i + 1],
            key[r : r + 1].repeat_interleave(2, dim=1),
            value[r : r + 1].repeat_interleave(2, dim=1),
            attn_mask=mask[i : i + 1],
            scale=0.3,
        )
        assert torch.allclose(got[i], want.transpose(1, 2)[0], atol=1e-6)
