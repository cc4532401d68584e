"""``optim.fused_head``: log-probs and entropies from the final hidden states a chunk
of tokens at a time (``trainer.head``), never the whole batch's logits.

The same numbers as the logits' path (log-probs and entropies bit for bit in the
forward, gradients to rounding), through the plain forward, the shared-prompt
forward, a value head, LoRA and a chat model directory; the models whose logits
are something else (a softcap, a scale, an adapter on the head) keep the model's
own forward; the memory a training forward keeps falls by the logits' share.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from option_registry import covers
from transformers import LlamaConfig, LlamaForCausalLM
from wiring import run, tiny

import trainer.head
import trainer.policy
from trainer.config import ModelConfig
from trainer.head import head_stats, split_model
from trainer.policy import Policy
from trainer.rows import Prefixes

WORDS = [f"w{i}" for i in range(40)]


def _unfused(h, weight, bias, targets, temperature, entropy_grad):
    """What ``Policy._stats`` computes from logits."""
    z = F.linear(h, weight, bias).float()
    if temperature != 1.0:
        z = z / temperature
    lse = torch.logsumexp(z, -1)
    lp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    with torch.set_grad_enabled(entropy_grad):
        zz, ll = (z, lse) if entropy_grad else (z.detach(), lse.detach())
        ent = ll - (torch.softmax(zz, -1) * zz).sum(-1)
    return lp, ent


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 16 tokens (the least) for the vocabularies below: many chunks."""
    monkeypatch.setattr(trainer.head, "CHUNK_BYTES", 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_chunked_head_stats_are_the_logits_path(
    small_chunks, dtype, temperature, entropy_grad
):
    g = torch.Generator().manual_seed(0)
    n, hid, vocab = 75, 24, 300  # 5 chunks, the last one short
    h0 = torch.randn(n, hid, generator=g).to(dtype)
    w0 = (torch.randn(vocab, hid, generator=g) * 0.3).to(dtype)
    b0 = torch.randn(vocab, generator=g).to(dtype)
    targets = torch.randint(0, vocab, (n,), generator=g)
    g_lp, g_ent = torch.randn(n, generator=g), torch.randn(n, generator=g)
    results = []
    for fused in (False, True):
        h, w, b = (x.clone().requires_grad_() for x in (h0, w0, b0))
        if fused:
            lp, ent = head_stats(
                h,
                w,
                b,
                targets,
                temperature=temperature,
                entropy=True,
                entropy_grad=entropy_grad,
            )
        else:
            lp, ent = _unfused(h, w, b, targets, temperature, entropy_grad)
        loss = (lp * g_lp).sum() + ((ent * g_ent).sum() if entropy_grad else 0)
        loss.backward()
        assert ent.requires_grad == entropy_grad
        results.append((lp.detach(), ent.detach(), h.grad, w.grad, b.grad))
    (lp0, ent0, *grads0), (lp1, ent1, *grads1) = results
    # The same arithmetic (a product over fewer rows may round otherwise).
    _close(lp0, lp1, 1e-6)
    _close(ent0, ent1, 1e-6)
    for a, b in zip(grads0, grads1, strict=True):
        assert a.dtype == b.dtype
        # bf16 gradients: within two of their units in the last place.
        _close(a, b, 1e-5 if dtype == torch.float32 else 2**-6)


def _close(a: torch.Tensor, b: torch.Tensor, rel: float, name: str = "") -> None:
    """Equal to ``rel`` of the larger's largest magnitude."""
    a, b = a.detach().float(), b.detach().float()
    scale = float(a.abs().max()) or 1.0
    assert float((a - b).abs().max()) <= rel * scale, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_frozen_heads_input_gradient_is_taken_in_the_forward(
    small_chunks, monkeypatch, dtype, temperature
):
    """LoRA's head is frozen: with no entropy gradient the hidden states'
    gradient per unit of log-prob is taken while the logits are at hand, and the
    backward makes no logits again."""
    g = torch.Generator().manual_seed(0)
    n, hid, vocab = 40, 16, 200
    h0 = torch.randn(n, hid, generator=g).to(dtype)
    w = (torch.randn(vocab, hid, generator=g) * 0.3).to(dtype)
    targets = torch.randint(0, vocab, (n,), generator=g)
    g_lp = torch.randn(n, generator=g)
    h = h0.clone().requires_grad_()
    lp0, _ = _unfused(h, w, None, targets, temperature, False)
    (lp0 * g_lp).sum().backward()
    made = []
    real = trainer.head._logits
    monkeypatch.setattr(trainer.head, "_logits", lambda *a: made.append(1) or real(*a))
    h1 = h0.clone().requires_grad_()
    lp1, ent = head_stats(h1, w, None, targets, temperature=temperature, entropy=True)
    forward_calls = len(made)
    (lp1 * g_lp).sum().backward()
    assert forward_calls == 3 and len(made) == 3  # 40 tokens: 3 chunks, once
    _close(lp0, lp1, 1e-6)
    _close(h.grad, h1.grad, 1e-5 if dtype == torch.float32 else 2**-6)


def test_head_stats_keep_the_batch_shape_and_skip_the_entropy():
    h = torch.randn(3, 5, 8)
    w = torch.randn(11, 8)
    t = torch.randint(0, 11, (3, 5))
    lp, ent = head_stats(h, w, None, t)
    assert lp.shape == (3, 5) and ent is None
    ref, _ = _unfused(h, w, None, t, 1.0, False)
    assert torch.equal(lp, ref)


def _llama(vocab=97, **over) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    cfg.update(over)
    return LlamaForCausalLM(LlamaConfig(**cfg))


def test_a_plain_llama_is_split_into_its_decoder_and_head():
    model = _llama()
    decoder, head = split_model(model)
    assert decoder is model.model and head is model.lm_head


class _Scaled(LlamaForCausalLM):
    """Logits scaled in the forward and nowhere in the config (MiniCPM-style)."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out


def test_models_whose_logits_are_not_the_plain_head_keep_their_forward():
    softcapped = _llama()
    softcapped.config.final_logit_softcapping = 30.0
    assert split_model(softcapped) is None
    scaled = _Scaled(_llama().config)
    assert split_model(scaled) is None  # caught by the check on a short input
    assert scaled.training  # the check left the modes as they were
    # An adapter on the head: the head is no plain Linear.
    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    wrapped = get_peft_model(
        _llama(), PeftLora(r=2, target_modules=["lm_head", "q_proj"])
    )
    assert split_model(wrapped) is None
    adapters = get_peft_model(_llama(), PeftLora(r=2, target_modules=["q_proj"]))
    decoder, head = split_model(adapters)
    assert head is adapters.get_base_model().lm_head


def _policies(**build):
    """The same policy twice: scored through its logits, and through the split
    head in chunks of 16 tokens."""
    torch.manual_seed(0)
    a = Policy.build(ModelConfig(size="tiny", **build.pop("model", {})), WORDS, **build)
    b = copy.deepcopy(a)
    a.fused_head = False
    assert split_model(b.model) is not None
    return a, b


def _batch(policy, rows=6, width=14, prompt=5, groups=2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, len(policy.tokenizer), (rows, width), generator=g)
    lengths = torch.randint(prompt + 2, width + 1, (rows,), generator=g)
    mask = (torch.arange(width) < lengths.unsqueeze(1)).long()
    of_row = torch.arange(rows) % groups
    for r in range(rows):  # a group's rows begin with one prompt
        ids[r, :prompt] = ids[int(of_row[r]), :prompt]
    ids = torch.where(mask.bool(), ids, policy.pad_id)
    prefixes = Prefixes(
        ids=ids[:groups, :prompt].clone(),
        mask=torch.ones(groups, prompt, dtype=torch.long),
        of_row=of_row,
        length=torch.full((rows,), prompt),
    )
    return ids, mask, prefixes


def _score(policy, ids, mask, *, prefixes=None, start=0, entropy_grad=False):
    policy.zero_grad(set_to_none=True)
    st = policy.token_stats(
        ids,
        mask,
        with_entropy=True,
        with_values=True,
        start=start,
        entropy_grad=entropy_grad,
        prefixes=prefixes,
    )
    g = torch.Generator().manual_seed(2)
    loss = (st.logprobs * torch.randn(st.logprobs.shape, generator=g)).sum()
    if entropy_grad:
        loss = loss + (st.entropy * 0.3).sum()
    if st.values is not None:
        loss = loss + (st.values**2).sum()
    loss.backward()
    grads = {
        n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None
    }
    return st, grads


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("value_head", [False, True])
def test_the_policy_scores_the_same_through_the_split_head(
    small_chunks, shared, value_head
):
    unfused, fused = _policies(with_value_head=value_head, temperature=0.8)
    ids, mask, prefixes = _batch(unfused)
    kw = {"prefixes": prefixes} if shared else {"start": 3}
    calls = []
    real = trainer.head._HeadStats.apply
    trainer.head._HeadStats.apply = lambda *a: calls.append(1) or real(*a)
    try:
        st0, g0 = _score(unfused, ids, mask, entropy_grad=True, **kw)
        assert not calls
        st1, g1 = _score(fused, ids, mask, entropy_grad=True, **kw)
        assert calls
    finally:
        trainer.head._HeadStats.apply = real
    _close(st0.logprobs, st1.logprobs, 1e-6)
    _close(st0.entropy, st1.entropy, 1e-6)
    if value_head:  # the value head reads the same hidden states
        assert torch.equal(st0.values, st1.values)
    else:
        assert st1.values is None
    assert g0.keys() == g1.keys() and len(g0) > 10
    for name in g0:
        _close(g0[name], g1[name], 1e-5, name)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    from tests.trainer.chatmodel import build_chat_model

    return build_chat_model(tmp_path_factory.mktemp("chat"), kv_heads=2)


def _pair(cfg: ModelConfig) -> tuple[Policy, Policy]:
    torch.manual_seed(0)
    fused = Policy.build(cfg, [])
    for name, p in fused.named_parameters():
        if "lora_B" in name:  # adapters that change the logits
            torch.nn.init.normal_(p, std=0.5)
    assert split_model(fused.model) is not None
    unfused = copy.deepcopy(fused)
    unfused.fused_head = False
    return unfused, fused


def test_a_lora_policy_and_its_adapters_off_score_the_same_through_the_split_head(
    small_chunks, chat_dir
):
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    unfused, fused = _pair(ModelConfig(path=str(chat_dir), lora=lora))
    ids, mask, prefixes = _batch(unfused)
    st0, g0 = _score(unfused, ids, mask, prefixes=prefixes)
    st1, g1 = _score(fused, ids, mask, prefixes=prefixes)
    _close(st0.logprobs, st1.logprobs, 1e-6)
    assert g0.keys() == g1.keys() and all("lora" in n for n in g0)
    for name in g0:
        _close(g0[name], g1[name], 1e-5, name)
    with torch.no_grad():
        off0 = unfused.adapters_off().token_stats(ids, mask, prefixes=prefixes)
        off1 = fused.adapters_off().token_stats(ids, mask, prefixes=prefixes)
    _close(off0.logprobs, off1.logprobs, 1e-6)
    assert float((off1.logprobs - st1.logprobs).abs().max()) > 1e-3  # adapters off


def test_a_chat_model_directory_scores_the_same_through_the_split_head(
    small_chunks, chat_dir
):
    unfused, fused = _pair(ModelConfig(path=str(chat_dir)))
    ids = torch.tensor([fused.encode("hello there, what is 2 + 2 ?")] * 3)
    ids[1, -3:] = fused.pad_id
    mask = (ids != fused.pad_id).long()
    st0, g0 = _score(unfused, ids, mask, start=2)
    st1, g1 = _score(fused, ids, mask, start=2)
    _close(st0.logprobs, st1.logprobs, 1e-6)
    for name in g0:
        _close(g0[name], g1[name], 1e-5, name)


def _saved(policy, ids, mask) -> tuple[int, int]:
    """What a training forward and its loss keep for the backward (parameters
    left out): (bytes, bytes of tensors a vocabulary wide)."""
    params = {p.data_ptr() for p in policy.parameters()}
    vocab = len(policy.tokenizer)
    total = wide = 0

    def pack(t):
        nonlocal total, wide
        if t.data_ptr() not in params:
            total += t.numel() * t.element_size()
            if t.dim() and t.shape[-1] == vocab:
                wide += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        st = policy.token_stats(ids, mask, with_entropy=True, start=1)
        (st.logprobs.sum() + st.entropy.sum()).backward()
    return total, wide


def test_a_training_forward_keeps_no_logits_for_a_large_vocabulary():
    words = [f"w{i}" for i in range(8000)]
    torch.manual_seed(0)
    unfused = Policy.build(ModelConfig(size="tiny"), words)
    fused = copy.deepcopy(unfused)
    unfused.fused_head = False
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 8000, (8, 64), generator=g)
    mask = torch.ones_like(ids)
    (whole, whole_wide), (chunked, chunked_wide) = (
        _saved(unfused, ids, mask),
        _saved(fused, ids, mask),
    )
    logits = 8 * 62 * len(fused.tokenizer) * 4  # float32 logits of the positions
    assert whole_wide >= logits  # the logits' path keeps them (and a softmax)
    assert chunked_wide == 0  # the split head keeps hidden states, not logits
    assert chunked <= whole - logits


@covers("optim.fused_head")
def test_a_run_trains_the_same_through_the_split_head(tmp_path, monkeypatch):
    """Two steps of PPO (a value head, an entropy bonus, two epochs) with and
    without the fused head: the same rewards, metrics to 1e-4 and weights to
    rounding; only the fused run scored through ``head_stats``."""
    calls = {"fused": 0}
    real = trainer.head.head_stats

    def spy(*args, **kwargs):
        calls["fused"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer.policy, "head_stats", spy)
    algo = {"preset": "ppo", "entropy_coef": 0.01}
    on = run(tiny(steps=2, algorithm=algo, optim={"epochs": 2}), tmp_path)
    fused_calls, calls["fused"] = calls["fused"], 0
    off = run(
        tiny(steps=2, algorithm=algo, optim={"epochs": 2, "fused_head": False}),
        tmp_path,
    )
    assert fused_calls > 0 and calls["fused"] == 0
    assert [e["step"] for e in on.sink.of_type("step")] == [1, 2]
    for a, b in zip(on.every_metrics(), off.every_metrics(), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if not key.startswith(("timing_s/", "perf/")) and "per_s" not in key:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), key
    wa, wb = on.weights(), off.weights()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5)
