"""The continuous engine's lean forward (trainer/engines/lean.py): the slot rows'
forward of Llama-family models as plain tensor calls must give the model's own
logits, follow its weights as the optimiser changes them, and step aside (the
model's forward runs) wherever it cannot know that."""

from __future__ import annotations

import logging
import random

import pytest
import torch
from transformers import (
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import trainer.engines.lean as lean_mod
import trainer.engines.lean_products as products_mod
from trainer.config import ModelConfig
from trainer.engines.lean import LeanForward, lean_forward
from trainer.engines.prefill import reserve
from trainer.engines.slots import ATTENTION, SlotCache
from trainer.envs.base import make_env
from trainer.policy import Policy
from trainer.rollout import play

SMALL = {
    "vocab_size": 50,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 256,
}


def _model(cls, config_cls, **kw):
    torch.manual_seed(0)
    config = config_cls(**{**SMALL, **kw})
    config._attn_implementation = "sdpa"
    model = cls(config).eval()
    with torch.no_grad():  # transformers starts biases at zero: make them count
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.5)
    return model


FAMILIES = {
    "llama": lambda: _model(LlamaForCausalLM, LlamaConfig),
    "llama-gqa": lambda: _model(LlamaForCausalLM, LlamaConfig, num_key_value_heads=2),
    "llama-biases": lambda: _model(
        LlamaForCausalLM, LlamaConfig, attention_bias=True, mlp_bias=True
    ),
    "llama3-rope": lambda: _model(
        LlamaForCausalLM,
        LlamaConfig,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
    "qwen2": lambda: _model(Qwen2ForCausalLM, Qwen2Config, num_key_value_heads=2),
    "qwen3": lambda: _model(
        Qwen3ForCausalLM, Qwen3Config, num_key_value_heads=2, head_dim=8
    ),
    "mistral": lambda: _model(
        MistralForCausalLM, MistralConfig, sliding_window=None, num_key_value_heads=2
    ),
}


def _forwards(model, run):
    """What ``run`` (the model's forward or the lean one) gives on a slot-row
    prefill of three ragged rows, a decode step with a row rejoining with three
    tokens and a blank row, and a prefill of some rows only (gathered)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (40,), generator=g).tolist()
    cpu, f32 = torch.device("cpu"), torch.float32
    cache = SlotCache(3, capacity=4)  # grown twice on the way
    out = [run(cache, cache.feed(None, [ids[:7], ids[7:9], ids[9:20]], 0, cpu, f32))]
    args = cache.step({0: ids[20]}, {2: ids[21:24]}, 0, cpu, f32)
    out.append(run(cache, args, torch.tensor([0, 2])))
    args = cache.feed([1], [ids[24:30]], 0, cpu, f32)
    out.append(run(cache, args))
    return out


def _by_model(model):
    def run(cache, args, rows=None):
        config = model.config
        kept, config._attn_implementation = config._attn_implementation, ATTENTION
        try:
            logits = model(**args, cache=cache, use_cache=True).logits[:, -1]
        finally:
            config._attn_implementation = kept
        return logits if rows is None else logits.index_select(0, rows)

    return run


def _by_lean(model):
    lean, why = lean_forward(model)
    assert lean is not None, why
    return lambda cache, args, rows=None: lean(cache, **args, rows=rows)


def _decodes(model, lean):
    """A prefill of left-padded rows, then three decode steps over its cache with
    room reserved, as the eager engine makes them (one row's mask closed after
    its first step): each forward's logits, by the model's forward or by
    ``lean``."""
    ids = torch.tensor([[3, 4, 5, 6, 7], [0, 0, 0, 8, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache, pos, logits = DynamicCache(), positions[:, -1:] + 1, []

    def forward(tok, mask, pos):
        if lean is not None:
            return lean.over_cache(cache, tok, mask, pos)
        out = model(
            input_ids=tok,
            attention_mask=mask,
            position_ids=pos,
            cache=cache,
            use_cache=True,
        )
        return out.logits[:, -1]

    logits.append(forward(ids, mask, positions))
    reserve(cache, 3)
    for step, keep in enumerate(([1, 1], [1, 0], [1, 0])):
        mask = torch.cat([mask, torch.tensor(keep)[:, None]], dim=1)
        logits.append(forward(torch.tensor([[10 + step], [20 + step]]), mask, pos))
        pos = pos + 1
    return logits


def _assert_same(model):
    with torch.no_grad():
        want = _forwards(model, _by_model(model))
        got = _forwards(model, _by_lean(model))
        lean = lean_forward(model)[0]
        assert lean.cache_ok
        want += _decodes(model, None)
        got += _decodes(model, lean)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.fixture(params=["dense", "packed"])
def products(request, monkeypatch):
    """The projections' products as F.linear's, or through oneDNN's packed
    weights (every product packed: the test models' are below PACK_MIN)."""
    if request.param == "packed":
        if not products_mod.can_pack(torch.zeros(1)):
            pytest.skip("this torch build has no oneDNN")
        monkeypatch.setattr(products_mod, "PACK_MIN", 0)
    return request.param


def _packed(model) -> bool:
    lean = lean_forward(model)[0]
    return all(p.packed for layer in lean.layers for p in (layer.qkv, layer.down))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_lean_forward_gives_the_models_logits(family, products):
    model = FAMILIES[family]()
    _assert_same(model)
    assert _packed(model) == (products == "packed")


def test_it_follows_the_weights_as_the_optimiser_changes_them(products):
    model = FAMILIES["llama-gqa"]()
    _assert_same(model)
    assert _packed(model) == (products == "packed")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    model(
        input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])
    ).loss.backward()
    opt.step()
    model.eval()
    _assert_same(model)  # the concatenated q/k/v and gate/up weights were remade
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.mul_(3)  # in place, by hand
    _assert_same(model)


def test_weights_are_held_twice_only_on_the_cpu_and_for_a_small_model(monkeypatch):
    """Off the CPU, or past the copy limit, each projection is its own product
    (no concatenated copy), and the logits are the same."""
    from trainer.engines.lean_products import fused

    cpu = (torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    assert fused(cpu).weight.shape == (6, 4)
    assert fused(cpu, concatenate=False) is None
    own = fused(cpu[:1], concatenate=False).weight
    assert own.data_ptr() == cpu[0].weight.data_ptr()
    model = FAMILIES["qwen2"]()
    assert LeanForward(model).concatenate
    monkeypatch.setattr(lean_mod, "COPY_LIMIT", 1000)
    lean = LeanForward(model)
    assert not lean.concatenate
    lean.refresh()
    assert lean.layers[0].qkv is None and lean.layers[0].o is not None
    assert lean.agrees()


def test_products_are_packed_on_the_cpu_from_a_size_and_where_onednn_is_on(
    monkeypatch,
):
    """oneDNN's packed products for the projections of PACK_MIN weights or more
    (below it F.linear costs less a call) of a float32 model on the CPU, not
    where oneDNN is turned off, PACK is False or the model has moved to another
    dtype since; the logits are the model's either way."""
    if not products_mod.can_pack(torch.zeros(1)):
        pytest.skip("this torch build has no oneDNN")
    model = FAMILIES["llama"]()  # q/k/v: 96 x 32 weights; gate/up 128 x 32
    monkeypatch.setattr(products_mod, "PACK_MIN", 96 * 32 + 1)
    lean = LeanForward(model)
    lean.refresh()
    layer = lean.layers[0]
    assert layer.gate_up.packed and not layer.qkv.packed and not layer.o.packed
    assert lean.agrees()
    with torch.backends.mkldnn.flags(enabled=False):
        assert not LeanForward(model).pack
    with torch.no_grad():  # moved to another dtype since: its weights, unpacked
        model.to(torch.float64)
    lean.refresh()
    assert not layer.gate_up.packed
    monkeypatch.setattr(products_mod, "PACK", False)
    assert not LeanForward(model.float()).pack
    assert not products_mod.can_pack(torch.zeros(1, dtype=torch.bfloat16))


def test_a_model_that_is_gone_leaves_nothing_behind():
    """What is kept per model does not keep the model (nor its weights) alive:
    a worker that trains one run after another frees each run's model."""
    import gc
    import weakref

    model = FAMILIES["llama"]()
    assert lean_forward(model)[0] is not None
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_lora_projections_are_called_as_their_modules():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        FAMILIES["qwen2"](),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"]),
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    model.eval()
    _assert_same(model)
    lean, _ = lean_forward(model)
    assert lean.layers[0].qkv is None and lean.layers[0].gate_up is None
    assert lean.layers[0].o is not None  # o_proj has no adapter: its weight


def test_the_heads_hooks_apply_and_any_other_hook_hands_back_to_the_model():
    model = FAMILIES["llama"]()
    bias = torch.zeros(50)
    bias[7] = 50.0
    head = model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: out + bias
    )
    try:
        _assert_same(model)
        with torch.no_grad():
            got = _forwards(model, _by_lean(model))
        assert all((logits.argmax(-1) == 7).all() for logits in got)
        other = model.model.layers[1].mlp.register_forward_pre_hook(lambda m, a: None)
        lean, why = lean_forward(model)
        assert (
            lean is None
            and why == "a hook on model.layers.1.mlp (the model's forward runs it)"
        )
        other.remove()
        assert lean_forward(model)[0] is not None
    finally:
        head.remove()


def test_transformers_output_capturing_hooks_do_not_count():
    """Asking the model for hidden states (as PPO's value head does) leaves
    transformers' capturing hooks on its layers; they record nothing in the lean
    forward's calls, so it stays on."""
    model = FAMILIES["llama"]()
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert any(layer._forward_hooks for layer in model.model.layers)
    assert lean_forward(model)[0] is not None
    _assert_same(model)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (
            lambda: _model(
                MistralForCausalLM,
                MistralConfig,
                sliding_window=None,
                hidden_act="gelu",
            ),
            "hidden_act 'gelu' (SiLU MLPs only)",
        ),
        (
            lambda: torch.nn.Linear(2, 2),
            "model type None is not one of llama, mistral, qwen2, qwen3",
        ),
    ],
)
def test_what_it_does_not_know_it_leaves_to_the_model(make, reason):
    model = make()
    assert lean_forward(model) == (None, reason)


def test_a_norm_it_does_not_know_is_refused():
    model = FAMILIES["llama"]()
    model.model.layers[1].post_attention_layernorm = torch.nn.LayerNorm(32)
    assert lean_forward(model) == (None, "a LayerNorm where an RMS norm goes")


def test_attention_dropout_in_training_mode_is_the_models():
    model = _model(LlamaForCausalLM, LlamaConfig, attention_dropout=0.1)
    assert lean_forward(model)[0] is not None
    model.train()
    assert lean_forward(model) == (None, "attention dropout in training mode")


def test_a_forward_that_does_not_agree_with_the_model_is_not_used(monkeypatch, caplog):
    """A planted break (the rotation skipped): the check against the model's own
    forward finds it, and the slot rows keep the model's forward."""
    monkeypatch.setattr(lean_mod, "_rotate", lambda x, cos, sin: x)
    model = FAMILIES["llama"]()
    with caplog.at_level(logging.INFO, logger="trainer.engines.lean"):
        assert lean_forward(model) == (None, "its logits differ from the model's")
    assert "differ" in caplog.text
    monkeypatch.undo()
    assert LeanForward(model).agrees()


@pytest.fixture(scope="module")
def swarm():
    env = make_env("swarm", seed=0)
    torch.manual_seed(0)
    policy = Policy.build(ModelConfig(size="tiny"), env.vocabulary(), temperature=0.9)
    lift = torch.zeros(policy.model.config.vocab_size)
    lift[list(policy.stop_ids)] = 3.0
    policy.model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: out + lift
    )
    return env, policy


def test_the_engine_rolls_out_the_same_episodes_with_or_without_it(swarm, monkeypatch):
    """Through the real rollout: the lean forward runs (counted) and the episodes
    are the model's forward's, token for token."""
    from trainer.config import RolloutConfig

    env, policy = swarm
    cfg = RolloutConfig(
        tasks_per_step=2,
        group_size=3,
        max_turns=4,
        max_action_tokens=10,
        max_total_tokens=400,
    )
    tasks = env.sample_tasks(2, random.Random(3))
    calls = []
    real = LeanForward.__call__
    monkeypatch.setattr(
        LeanForward,
        "__call__",
        lambda self, *a, **k: calls.append(1) or real(self, *a, **k),
    )

    def episodes(use_lean):
        policy.use_engine("continuous").lean = use_lean
        got = play(policy, env, tasks, cfg, generator=torch.Generator().manual_seed(4))
        return [
            ([s.token_ids for s in ro.segments], [s.logprobs for s in ro.segments])
            for ro in got
        ]

    with_model = episodes(False)
    assert not calls
    with_lean = episodes(True)
    assert len(calls) > 10
    assert [t for t, _ in with_lean] == [t for t, _ in with_model]
    assert sum(len(t) for t, _ in with_lean) > 6  # some turns
    for (_, a), (_, b) in zip(with_lean, with_model, strict=True):
        for x, y in zip(a, b, strict=True):
            if x is not None:
                torch.testing.assert_close(
                    torch.tensor(x), torch.tensor(y), rtol=0, atol=1e-6
                )


def test_the_eager_engine_decodes_through_it_with_the_reference_loops_tokens(swarm):
    """The default engine's decode steps go through the lean forward (counted),
    and give the reference loop's tokens and log-probs for the same seed."""
    _, policy = swarm
    contexts = [[policy.bos_id, 5, 6, 7], [policy.bos_id, 8], [policy.bos_id, 5, 6, 7]]
    calls = []
    real = LeanForward.over_cache

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    def generate(engine, use_lean=True):
        eng = policy.use_engine(engine)
        eng.lean = use_lean
        return eng.generate(
            contexts,
            [12, 12, 5],
            temperature=0.9,
            top_p=1.0,
            generator=torch.Generator().manual_seed(7),
            with_logprobs=True,
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LeanForward, "over_cache", counted)
        got = generate("eager")
        # Every decode step (the last token is not fed; the prefill is the model's).
        assert len(calls) == max(map(len, got.tokens)) - 1
        calls.clear()
        off = generate("eager", use_lean=False)
        assert not calls
    want = generate("reference")
    assert got.tokens == want.tokens == off.tokens
    assert max(map(len, got.tokens)) > 2
    for a, b in zip(got.logprobs, want.logprobs, strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)
