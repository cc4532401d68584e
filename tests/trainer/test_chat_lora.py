"""A pretrained chat model with LoRA on the user's dataset, end to end.

The model directory is built inside the test (:mod:`tests.trainer.chatmodel`): a real
byte-level BPE tokenizer with a chat template that has a tool role, and a tiny Llama.
"""

from __future__ import annotations

import json
import random

import pytest
import torch
from chatmodel import build_chat_model
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.cli import main as cli
from trainer.config import ModelConfig, TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.policy import Policy
from trainer.rollout import observation_ids, prompt_ids
from trainer.runner import run_from_config

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "123 * 45"}}</tool_call>'
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rows = [
        {"prompt": f"use the calculator: what is {a} * 45 ?", "answer": str(a * 45)}
        for a in (123, 77, 301, 19)
    ]
    p = tmp_path_factory.mktemp("data") / "mul.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _env(data):
    return make_env(
        "dataset", {"path": str(data), "tools": ["calculator"], "holdout": 0.0}
    )


def test_prompts_and_tool_turns_are_rendered_with_the_chat_template(model_dir, data):
    env = _env(data)
    policy = Policy.build(ModelConfig(path=str(model_dir)), env.vocabulary())
    tok = AutoTokenizer.from_pretrained(model_dir)
    task = env.sample_tasks(1, random.Random(0))[0]
    msgs = [dict(m) for m in task.messages]
    assert [m["role"] for m in msgs] == ["system", "user"]
    want = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = prompt_ids(policy, task)
    assert tok.decode(ids) == want
    # Generation stops at the template's end of turn or at EOS.
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert policy.eoa_id == im_end and set(policy.stop_ids) == {
        im_end,
        tok.eos_token_id,
    }
    # A hand-written assistant turn with a tool call: parsed, executed, and its result
    # appended as a tool message, exactly as the template writes the conversation.
    action = tok.encode(CALL, add_special_tokens=False) + [im_end]
    sess = env.start(task)
    result = sess.step(policy.renderer.action_text(action))
    assert result.facts.ok and result.observation == str(123 * 45)
    obs = observation_ids(policy, result.observation)
    convo = msgs + [
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": str(123 * 45)},
    ]
    full = tok.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
    assert tok.decode(ids + action + obs) == full
    # A turn cut by its budget (no end-of-turn token) is closed by the observation.
    cut = observation_ids(policy, "x", closed=False)
    assert tok.decode(cut).startswith("<|im_end|>\n<|im_start|>tool\nx")


def test_the_kl_reference_is_the_base_model_with_the_adapters_off(model_dir):
    torch.manual_seed(0)
    policy = Policy.build(ModelConfig(path=str(model_dir), lora=LORA), [])
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.tensor([[5, 9, 17, 33, 40]])
    attn = torch.ones_like(ids)
    ref = policy.adapters_off().token_stats(ids, attn).logprobs
    with torch.no_grad():
        lp = torch.log_softmax(base(input_ids=ids).logits[0, :-1], -1)
    want = lp.gather(-1, ids[0, 1:, None])[:, 0]
    assert torch.allclose(ref[0], want, atol=1e-5)
    assert not torch.allclose(
        policy.token_stats(ids, attn).logprobs[0], want, atol=1e-3
    )
    assert (
        sum(p.requires_grad for p in policy.parameters()) == 2 * 2 * 2
    )  # A,B x q,v x 2 layers


def test_three_grpo_steps_with_lora_on_a_tool_dataset_then_export(
    model_dir, data, tmp_path
):
    cfg = TrainConfig.model_validate(
        {
            "steps": 3,
            "model": {"path": str(model_dir), "lora": LORA},
            "env": {
                "name": "dataset",
                "params": {"path": str(data), "tools": ["calculator"], "holdout": 0.0},
            },
            "rollout": {
                "tasks_per_step": 2,
                "group_size": 2,
                "max_turns": 2,
                "max_action_tokens": 12,
            },
            "algorithm": {"preset": "grpo", "kl_beta": 0.1, "entropy_coef": 0.01},
            "optim": {"lr": 0.05},
            "checkpoint": {"every": 3},
            "reward": {
                "components": [
                    {"name": "numeric_match", "weight": 1.0},
                    {"name": "format", "weight": 0.1},
                ]
            },
        }
    )
    sink = ListSink()
    out = tmp_path / "run"
    result = run_from_config(cfg, sink, checkpoint_dir=out / "checkpoints")
    assert result.status == "succeeded" and result.last_step == 3
    trajs = sink.of_type("trajectory")
    assert len(trajs) == 12
    for ev in trajs:
        first = ev["segments"][0]
        assert first["kind"] == "prompt" and first["text"].startswith(
            "<|im_start|>system"
        )
        roles = {s["kind"]: s["role"] for s in ev["segments"]}
        assert (
            roles.get("action") == "assistant" and roles.get("tool", "tool") == "tool"
        )
        for key, per_step in ev["rewards"]["per_step"].items():
            assert len(per_step) == max(1, len(ev["steps"])), key
            assert sum(per_step) == pytest.approx(ev["rewards"]["components"][key])
    steps = [e for e in sink.of_type("step") if e["step"] > 0]
    assert "kl" in steps[-1]["metrics"]
    # The checkpoint holds the adapter (peft's format) and only trained weights.
    ckpt = out / "checkpoints" / "step-000003"
    assert (ckpt / "adapter" / "adapter_config.json").is_file()
    assert (ckpt / "adapter" / "adapter_model.safetensors").is_file()
    with safe_open(str(ckpt / "policy.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and all("lora_" in k for k in keys)
    # export-model merges it into a plain model directory.
    assert cli(["export-model", str(out), str(tmp_path / "merged")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.state_dict()[q], base.state_dict()[q])
    k = "model.layers.0.self_attn.k_proj.weight"  # not adapted: unchanged
    assert torch.equal(merged.state_dict()[k], base.state_dict()[k])
    assert AutoTokenizer.from_pretrained(tmp_path / "merged").chat_template


def _lora_policy(model_dir, alpha: float) -> Policy:
    """A LoRA policy (r = 4) whose adapters are set by hand: A drawn from a fixed
    seed, B constant and small, so the adapters' effect is about linear in their
    scaling; the same A and B whatever ``alpha``."""
    policy = Policy.build(
        ModelConfig(path=str(model_dir), lora={**LORA, "alpha": alpha}), []
    )
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in sorted(policy.named_parameters()):
            if "lora_A" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif "lora_B" in name:
                p.fill_(2e-3)
    return policy.eval()


def test_lora_alpha_sets_the_adapters_scaling_alpha_over_r(model_dir):
    """Guards the wiring of ``model.lora.alpha`` into peft's ``LoraConfig``
    (mutant M16: ``lora_alpha=lora.r``, every adapter then scaled by 1): each
    adapted layer scales its update by alpha / r, so doubling alpha doubles what
    the adapters add to the base model's log-probs."""
    from peft.tuners.lora import LoraLayer

    ids = torch.tensor([[5, 9, 17, 33, 40, 61, 70]])
    attn = torch.ones_like(ids)
    shift = {}
    for alpha in (8.0, 16.0):
        policy = _lora_policy(model_dir, alpha)
        layers = [m for m in policy.modules() if isinstance(m, LoraLayer)]
        assert len(layers) == 2 * 2  # q, v x 2 layers
        assert {m.scaling["default"] for m in layers} == {alpha / LORA["r"]}
        with torch.no_grad():
            on = policy.token_stats(ids, attn).logprobs[0]
            off = policy.adapters_off().token_stats(ids, attn).logprobs[0]
        shift[alpha] = (on - off).double()
    assert shift[8.0].abs().max() > 1e-4  # the adapters did act
    # Linear up to the model's curvature: within 5% of double, as a whole.
    twice = 2 * shift[8.0]
    assert float((shift[16.0] - twice).norm()) < 0.05 * float(twice.norm())
