"""trainer.budget: a step's tokens and memory, checked against hand-worked numbers."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from trainer.budget import (
    SCORE_CHUNK_ROWS,
    ModelShape,
    default_shape,
    estimate_step,
    llama_params,
    shape_from_hf_config,
    with_lora,
)
from trainer.config import TrainConfig

# The config of issue 21.4: accepted by the schema, took a worker to 5.9 GB.
HUGE = {
    "rollout": {
        "tasks_per_step": 4096,
        "group_size": 256,
        "max_turns": 64,
        "max_action_tokens": 4096,
        "max_total_tokens": 131072,
    }
}

# hidden 8, MLP 16, 2 layers, KV width 4, vocabulary 10, float32: small enough to
# work every term out by hand.
SHAPE = ModelShape(
    params=1000,
    trainable=1000,
    hidden=8,
    intermediate=16,
    layers=2,
    kv_width=4,
    vocab=10,
    dtype_bytes=4,
)


def config(**rollout) -> TrainConfig:
    base = {"tasks_per_step": 3, "group_size": 2, "max_turns": 2}
    base.update(rollout)
    return TrainConfig.model_validate({"rollout": {"max_action_tokens": 5, **base}})


def test_the_issues_config_holds_137_billion_tokens_a_step():
    budget = estimate_step(
        TrainConfig.model_validate(HUGE),
        default_shape("tiny", 60, dtype_bytes=4),
        kl_reference=False,
    )
    assert budget.rollouts == 4096 * 256
    # 64 turns x 4096 tokens = 262,144 > 131,072: the whole-trajectory budget binds.
    assert budget.rollout_tokens == 131072 and budget.capped
    assert budget.tokens == 4096 * 256 * 131072 == 137_438_953_472
    assert budget.token_fields == [
        "rollout.tasks_per_step",
        "rollout.group_size",
        "rollout.max_total_tokens",
    ]
    assert budget.memory_bytes > 2**40  # terabytes, on a 1M-parameter model


def test_a_rollout_is_turns_times_action_tokens_plus_the_prompt_below_the_cap():
    budget = estimate_step(
        config(max_total_tokens=512), SHAPE, prompt_tokens=7, kl_reference=False
    )
    assert (budget.rollout_tokens, budget.capped) == (2 * 5 + 7, False)
    assert budget.tokens == 3 * 2 * 17
    assert budget.token_fields[2:] == ["rollout.max_turns", "rollout.max_action_tokens"]


def test_every_memory_term_by_hand():
    budget = estimate_step(config(max_total_tokens=512), SHAPE, kl_reference=False)
    rows, length = 3 * 2, 10
    # weights + gradients + AdamW's two moments, float32
    assert budget.state_bytes == 1000 * 4 * 4
    # KV cache: rows x tokens x layers x (K and V) x width x bytes, plus the
    # sampler's three float (rows, vocab) tensors
    assert budget.generation_bytes == rows * length * 2 * 2 * 4 * 4 + rows * 10 * 4 * 3
    # one minibatch of every row: per token, (6h + 2kv + 4 inter) values a layer
    # and three float copies of the vocabulary
    per_token = 2 * (6 * 8 + 2 * 4 + 4 * 16) * 4 + 10 * 4 * 3
    assert budget.update_bytes == rows * length * per_token
    assert budget.score_bytes == rows * length * 10 * 4 * 2
    assert budget.memory_bytes == budget.state_bytes + budget.update_bytes
    assert budget.phase == "update"


def test_minibatches_divide_the_update_and_processes_the_rows():
    whole = estimate_step(config(tasks_per_step=4), SHAPE, kl_reference=False)
    halves = estimate_step(
        config(tasks_per_step=4).model_copy(
            update={"optim": config().optim.model_copy(update={"minibatches": 2})}
        ),
        SHAPE,
        kl_reference=False,
    )
    assert halves.update_bytes * 2 == whole.update_bytes
    two = TrainConfig.model_validate(
        {
            "rollout": {
                "tasks_per_step": 4,
                "group_size": 2,
                "max_turns": 2,
                "max_action_tokens": 5,
            },
            "resources": {"processes": 2},
        }
    )
    per_process = estimate_step(two, SHAPE, kl_reference=False)
    assert per_process.tokens == whole.tokens  # the step is the same size...
    assert per_process.generation_bytes * 2 == whole.generation_bytes  # ...shared


def test_micro_batches_bound_the_update_to_their_rows():
    def with_optim(**optim):
        base = config(tasks_per_step=4)  # 8 rows
        return base.model_copy(update={"optim": base.optim.model_copy(update=optim)})

    whole = estimate_step(with_optim(), SHAPE, kl_reference=False)
    quarter = estimate_step(with_optim(micro_batch_size=2), SHAPE, kl_reference=False)
    assert quarter.update_bytes * 4 == whole.update_bytes
    # Micro-batches within minibatches: the smaller of the two row counts.
    both = with_optim(minibatches=2, micro_batch_size=8)
    assert estimate_step(both, SHAPE, kl_reference=False).update_bytes * 2 == (
        whole.update_bytes
    )
    assert quarter.state_bytes == whole.state_bytes  # the update's state is as big
    # Scoring goes no wider than a micro-batch either (trainer.scoring.score_chunk).
    assert quarter.score_bytes * 4 == whole.score_bytes
    from trainer.scoring import SCORE_CHUNK

    assert SCORE_CHUNK == SCORE_CHUNK_ROWS


def test_fsdp_shards_the_state_and_the_reference_stays_whole():
    cfg = TrainConfig.model_validate(
        {
            "rollout": {"tasks_per_step": 4, "group_size": 2},
            "resources": {"processes": 4, "strategy": "fsdp"},
        }
    )
    sharded = estimate_step(cfg, SHAPE, kl_reference=False)
    assert sharded.state_bytes == 1000 * 4 * 4 // 4
    with_ref = estimate_step(cfg, SHAPE, kl_reference=True)
    assert with_ref.state_bytes - sharded.state_bytes == 1000 * 4


def test_bfloat16_weights_add_their_float32_copies_and_moments_to_the_state():
    import dataclasses

    bf16 = dataclasses.replace(SHAPE, dtype_bytes=2)
    cfg = config()
    # weights 2 + gradient 2 + float32 copy 4 + two float32 moments 8 (trainer.optimizer),
    # and the step's float32 gradients and temporary of its one bucket, 8 more
    assert estimate_step(cfg, bf16, kl_reference=False).state_bytes == 1000 * 24
    from trainer.budget import OPTIMIZER_BUCKET
    from trainer.optimizer import BUCKET_ELEMENTS

    assert OPTIMIZER_BUCKET == BUCKET_ELEMENTS
    plain = cfg.model_copy(
        update={"optim": cfg.optim.model_copy(update={"master_weights": False})}
    )
    # weights, gradient and both moments in bfloat16
    assert estimate_step(plain, bf16, kl_reference=False).state_bytes == 1000 * 2 * 4
    # float32 weights have no copies: the same either way
    assert estimate_step(plain, SHAPE, kl_reference=False).state_bytes == 1000 * 16


def test_lora_trains_only_its_adapters():
    lora = with_lora(SHAPE, rank=2, targets=4)
    adapters = 2 * 4 * 2 * 2 * 8  # layers x targets x rank x (A and B) x hidden
    assert (lora.trainable, lora.params) == (adapters, 1000 + adapters)
    budget = estimate_step(config(), lora, kl_reference=False)
    assert budget.state_bytes == lora.params * 4 + 3 * adapters * 4


@pytest.mark.parametrize("tied,kv_heads", [(True, 4), (False, 2)])
def test_the_parameter_formula_matches_a_real_llama(tied, kv_heads):
    cfg = LlamaConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=tied,
    )
    real = sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())
    assert real == llama_params(
        vocab=100,
        hidden=64,
        intermediate=160,
        layers=2,
        heads=4,
        kv_heads=kv_heads,
        head_dim=16,
        tied=tied,
    )
    shape = shape_from_hf_config(cfg.to_dict(), dtype_bytes=2)
    assert shape is not None
    assert (shape.params, shape.kv_width, shape.layers) == (real, kv_heads * 16, 2)


def test_a_config_json_without_the_sizes_has_no_shape():
    assert shape_from_hf_config({"hidden_size": 8}, dtype_bytes=4) is None
    assert shape_from_hf_config({"hidden_size": "x"}, dtype_bytes=4) is None
    absurd = {
        "vocab_size": 10,
        "hidden_size": 2**50,
        "intermediate_size": 1,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
    }
    assert shape_from_hf_config(absurd, dtype_bytes=4) is None


def test_a_token_budget_bounds_the_update_to_its_tokens():
    def with_optim(**optim):
        base = config(tasks_per_step=4)  # 8 rows
        return base.model_copy(update={"optim": base.optim.model_copy(update=optim)})

    whole = estimate_step(with_optim(), SHAPE, kl_reference=False)
    length = whole.rollout_tokens
    two_rows = with_optim(micro_batch_tokens=2 * length)
    quarter = estimate_step(two_rows, SHAPE, kl_reference=False)
    assert quarter.update_bytes * 4 == whole.update_bytes
    assert quarter.score_bytes * 4 == whole.score_bytes
    # A budget under one rollout: that rollout goes alone, not less.
    tiny = estimate_step(with_optim(micro_batch_tokens=1), SHAPE, kl_reference=False)
    assert tiny.update_bytes * 8 == whole.update_bytes
    # With micro_batch_size too: the smaller of the two.
    both = with_optim(micro_batch_tokens=4 * length, micro_batch_size=2)
    assert estimate_step(both, SHAPE, kl_reference=False).update_bytes == (
        quarter.update_bytes
    )


def test_the_fused_head_holds_one_chunk_of_logits():
    """optim.fused_head (on by default): the update and scoring hold one chunk of
    float32 logits, not every token's; off, or under fsdp, every token's."""
    import dataclasses

    from trainer.budget import UPDATE_VOCAB_COPIES, head_chunk_tokens

    big = dataclasses.replace(SHAPE, vocab=151936)  # Qwen2.5's vocabulary
    chunk = head_chunk_tokens(big.vocab)
    assert chunk == 220  # 128 MiB of float32 logits

    def step(**optim):
        base = config(tasks_per_step=64, max_action_tokens=64, max_total_tokens=256)
        cfg = base.model_copy(update={"optim": base.optim.model_copy(update=optim)})
        return estimate_step(cfg, big, kl_reference=False)

    fused, whole = step(), step(fused_head=False)
    tokens = 64 * 2 * 128  # rows x length
    activations = tokens * 2 * (6 * 8 + 2 * 4 + 4 * 16) * 4
    head = big.vocab * 4 * UPDATE_VOCAB_COPIES
    assert whole.update_bytes == activations + tokens * head
    assert fused.update_bytes == activations + chunk * head
    assert fused.score_bytes * (64 * 128) == whole.score_bytes * chunk
    assert fused.memory_bytes < whole.memory_bytes / 20
    # FSDP's sharded model scores through its logits (trainer.head.split_model).
    fsdp = config(tasks_per_step=64, max_action_tokens=64, max_total_tokens=256)
    fsdp = fsdp.model_copy(
        update={
            "resources": fsdp.resources.model_copy(
                update={"processes": 2, "strategy": "fsdp"}
            )
        }
    )
    sharded = estimate_step(fsdp, big, kl_reference=False)
    assert sharded.update_bytes == whole.update_bytes // 2  # half the rows each
    # A model whose logits are more than the head's product keeps them whole.
    capped = dataclasses.replace(big, head_transformed=True)
    base = config(tasks_per_step=64, max_action_tokens=64, max_total_tokens=256)
    assert estimate_step(base, capped, kl_reference=False).update_bytes == (
        whole.update_bytes
    )
    # A trained bf16 head sums its gradient in a float32 (V, H) buffer.
    bf16 = dataclasses.replace(big, dtype_bytes=2)
    fused16 = estimate_step(base, bf16, kl_reference=False).update_bytes
    assert fused16 == activations // 2 + chunk * head + big.vocab * big.hidden * 4


def test_a_config_naming_a_transform_of_the_logits_is_flagged():
    from trainer.budget import head_transformed

    plain = {
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    assert not head_transformed(plain)
    assert not shape_from_hf_config(plain, dtype_bytes=2).head_transformed
    for extra in (
        {"final_logit_softcapping": 30.0},  # Gemma 2
        {"logit_scale": 0.0625},  # Cohere
        {"logits_scaling": 8.0},  # Granite
        {"text_config": {"final_logit_softcapping": 30.0}},  # Gemma 3
    ):
        cfg = {**plain, **extra}
        assert head_transformed(cfg), extra
        assert shape_from_hf_config(cfg, dtype_bytes=2).head_transformed
    # Neutral values are no transform.
    assert not head_transformed({**plain, "logits_scaling": 1.0, "logit_scale": None})
    assert head_transformed(LlamaConfig(final_logit_softcapping=30.0))
    assert not head_transformed(LlamaConfig())


def test_the_continuous_engine_holds_as_many_episodes_as_may_be_live():
    # 3 tasks x 2 rollouts: rollout.max_live_episodes 2 holds a third of the KV
    # cache and sampler rows; 64 no more than there are; the update is every row's.
    whole = estimate_step(config(engine="continuous"), SHAPE, kl_reference=False)
    capped = estimate_step(
        config(engine="continuous", max_live_episodes=2), SHAPE, kl_reference=False
    )
    assert capped.generation_bytes * 3 == whole.generation_bytes
    more = estimate_step(
        config(engine="continuous", max_live_episodes=64), SHAPE, kl_reference=False
    )
    assert more.generation_bytes == whole.generation_bytes
    assert capped.update_bytes == whole.update_bytes
