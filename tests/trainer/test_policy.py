"""The policy wrapper: building, loading, sampling and scoring."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainer.batch import collate
from trainer.config import ModelConfig
from trainer.envs.base import Task
from trainer.models import PolicyError
from trainer.policy import Policy
from trainer.rollout import Rollout, Segment
from trainer.tokenizer import EOA, build_word_tokenizer

WORDS = ["calc", "answer", "+", "=", *map(str, range(10))]


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return Policy.build(ModelConfig(size="tiny"), WORDS)


def test_it_builds_a_default_model_of_about_a_million_parameters(policy):
    assert 500_000 < policy.num_params() < 2_000_000
    assert policy.device.type == "cpu"
    assert next(policy.parameters()).dtype == torch.float32


def test_it_round_trips_environment_text_through_its_tokenizer(policy):
    ids = policy.encode("calc 1 2 + 7")
    assert policy.decode(ids) == "calc 1 2 + 7"
    assert policy.tokens(ids) == ["calc", "1", "2", "+", "7"]


def test_it_respects_each_rows_token_budget_and_stops_at_end_of_action(policy):
    gen = torch.Generator().manual_seed(0)
    out = policy.generate(
        [[policy.bos_id, 5, 6], [policy.bos_id]], max_new_tokens=[3, 7], generator=gen
    )
    assert len(out[0]) <= 3 and len(out[1]) <= 7
    for row in out:
        assert policy.eoa_id not in row[:-1]  # nothing after the end of action


def test_recorded_tokens_and_texts_match_the_tokenizers_own(policy):
    """The fast paths used for events (a lookup table, one batched decode) give what
    the tokenizer itself gives, specials included; unknown ids fall back to it."""
    tok = policy.tokenizer
    seqs = [[], [tok.bos_token_id], policy.encode("calc 1 + 2") + [policy.eoa_id]]
    seqs += [[(7 * i + j) % len(tok) for j in range(i)] for i in range(1, 40)]
    assert policy.decode_many(seqs) == [tok.decode(s) for s in seqs]
    assert [policy.tokens(s) for s in seqs] == [
        tok.convert_ids_to_tokens(s) for s in seqs
    ]
    assert policy.tokens([len(tok) + 5]) == tok.convert_ids_to_tokens([len(tok) + 5])


def test_it_samples_reproducibly_with_the_same_generator(policy):
    a = policy.generate(
        [[policy.bos_id, 7]] * 4,
        max_new_tokens=6,
        generator=torch.Generator().manual_seed(3),
    )
    b = policy.generate(
        [[policy.bos_id, 7]] * 4,
        max_new_tokens=6,
        generator=torch.Generator().manual_seed(3),
    )
    assert a == b


def test_left_padding_does_not_change_what_a_row_samples(policy):
    """A row's continuation must not depend on its neighbours' lengths (positions and
    attention ignore the padding): greedy decoding alone vs in a ragged batch."""
    ctx = [policy.bos_id, 5, 6, 7]
    alone = policy.generate(
        [ctx],
        max_new_tokens=5,
        temperature=1e-4,
        generator=torch.Generator().manual_seed(0),
    )
    batch = policy.generate(
        [[policy.bos_id, 9, 9, 9, 9, 9, 9, 9], ctx],
        max_new_tokens=5,
        temperature=1e-4,
        generator=torch.Generator().manual_seed(0),
    )
    assert batch[1] == alone[0]


def test_rows_with_the_same_context_sample_as_if_alone(policy):
    """Identical contexts are read once and their cache shared; greedy decoding of a
    shared row matches decoding it by itself."""
    ctx, other = [policy.bos_id, 5, 6, 7], [policy.bos_id, 9, 8]
    greedy = {"max_new_tokens": 5, "temperature": 1e-4}
    alone = policy.generate([ctx], generator=torch.Generator().manual_seed(0), **greedy)
    mixed = policy.generate(
        [ctx, other, ctx, ctx], generator=torch.Generator().manual_seed(0), **greedy
    )
    assert mixed[0] == mixed[2] == mixed[3] == alone[0]


def test_shared_prompts_score_like_separate_rows_with_the_same_gradients():
    """Scoring each distinct prompt once (its K/V shared by the rows that start
    with it) gives the plain forward's numbers and gradients on every scored token."""
    torch.manual_seed(0)
    p = Policy.build(ModelConfig(size="tiny"), WORDS, with_value_head=True)
    rng = random.Random(0)
    prompts = [[p.bos_id, 5, 6], [p.bos_id, 7, 8, 9, 10, 11]]
    rollouts = []
    for g, prompt in enumerate(prompts):
        for i in range(3):
            segs = [Segment(0, "prompt", prompt, "prompt")]
            for turn in range(rng.randrange(1, 3)):
                act = [
                    rng.randrange(6, len(p.tokenizer))
                    for _ in range(rng.randrange(1, 5))
                ]
                segs.append(Segment(turn, "action", act + [p.eoa_id], None))
                segs.append(Segment(turn, "tool", [p.obs_id, 12, 13], "tool"))
            rollouts.append(Rollout(Task(f"t{g}", "x"), g, i, segs))
    batch = collate(rollouts, p.pad_id, p.device)
    assert batch.prefixes is not None and batch.prefixes.ids.shape[0] == 2
    mask = batch.loss_mask > 0
    seen = []
    for prefixes in (None, batch.prefixes):
        p.zero_grad(set_to_none=True)
        st = p.token_stats(
            batch.input_ids,
            batch.attention_mask,
            with_entropy=True,
            with_values=True,
            prefixes=prefixes,
        )
        ((st.logprobs + st.values) * batch.loss_mask).sum().backward()
        grads = torch.cat(
            [q.grad.flatten() for q in p.parameters() if q.grad is not None]
        )
        seen.append((st, grads))
    (plain, g_plain), (shared, g_shared) = seen
    for name in ("logprobs", "entropy", "values"):
        a, b = getattr(plain, name), getattr(shared, name)
        torch.testing.assert_close(b[mask], a[mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_shared, g_plain, atol=1e-5, rtol=1e-4)


def test_rows_shared_from_a_prompt_sum_their_gradients_the_same_way_every_time():
    """A shared prompt's keys, values and last logits are gathered out to its rows;
    the gradients flowing back are summed per prompt. On the CPU that sum must not
    depend on how threads meet (advanced indexing's backward accumulates in
    parallel: a run's numbers moved by ~1e-7 from one process to the next, and a
    seeded run diverged); a size where the parallel path runs, two threads."""
    from trainer.rows import take_rows

    torch.manual_seed(0)
    index = torch.randint(0, 11, (64,))
    grad = torch.randn(64, 4, 190, 32)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        sums = []
        for _ in range(20):
            x = torch.zeros(11, 4, 190, 32, requires_grad=True)
            take_rows(x, index).backward(grad)
            sums.append(x.grad)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(s, sums[0]) for s in sums)
    want = torch.zeros(11, 4, 190, 32, dtype=torch.float64)
    want.index_add_(0, index, grad.double())
    torch.testing.assert_close(sums[0].double(), want, atol=1e-5, rtol=0)


def test_scoring_shared_prompts_gives_the_same_gradients_every_time():
    """The same through the policy's shared-prompt forward (the KV cache and the
    prompts' last logits gathered to 64 rows of 11 prompts), repeated."""
    torch.manual_seed(0)
    p = Policy.build(ModelConfig(size="tiny"), WORDS)
    rng = random.Random(0)
    vocab = len(p.tokenizer)
    prompts = [
        [p.bos_id] + [rng.randrange(6, vocab) for _ in range(60)] for _ in range(11)
    ]
    rollouts = []
    for i in range(64):
        act = [rng.randrange(6, vocab) for _ in range(rng.randrange(2, 9))]
        segs = [
            Segment(0, "prompt", prompts[i % 11], "prompt"),
            Segment(0, "action", act + [p.eoa_id], None),
        ]
        rollouts.append(Rollout(Task(f"t{i % 11}", "x"), i % 11, i, segs))
    batch = collate(rollouts, p.pad_id, p.device)
    assert batch.prefixes is not None
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(8):
            p.zero_grad(set_to_none=True)
            st = p.token_stats(
                batch.input_ids, batch.attention_mask, prefixes=batch.prefixes
            )
            (st.logprobs * batch.loss_mask).sum().backward()
            grads.append([q.grad.clone() for q in p.parameters()])
    finally:
        torch.set_num_threads(threads)
    for other in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], other, strict=True))


def test_it_scores_log_probs_that_match_a_manual_softmax(policy):
    ids = torch.tensor([[policy.bos_id, 5, 6, 7]])
    mask = torch.ones_like(ids)
    stats = policy.token_stats(ids, mask, with_entropy=True)
    logits = policy.model(input_ids=ids).logits[0, :-1]
    manual = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    torch.testing.assert_close(stats.logprobs[0], manual)
    assert stats.entropy.shape == (1, 3) and bool((stats.entropy > 0).all())


def test_scoring_from_a_later_start_gives_the_same_numbers_there(policy):
    torch.manual_seed(1)
    ids = torch.randint(6, len(policy.tokenizer), (3, 9))
    mask = torch.ones_like(ids)
    mask[2, 7:] = 0  # a right-padded row
    full = policy.token_stats(ids, mask, with_entropy=True)
    late = policy.token_stats(ids, mask, with_entropy=True, start=4)
    torch.testing.assert_close(late.logprobs[:, 4:], full.logprobs[:, 4:])
    torch.testing.assert_close(late.entropy[:, 4:], full.entropy[:, 4:])
    assert late.logprobs.shape == (3, 8) and not late.logprobs[:, :4].any()
    # Entropy is a logged number unless asked for as part of the loss.
    assert not late.entropy.requires_grad and late.logprobs.requires_grad
    with_grad = policy.token_stats(ids, mask, with_entropy=True, entropy_grad=True)
    with_grad.entropy.sum().backward()
    assert policy.model.model.embed_tokens.weight.grad is not None
    policy.model.zero_grad(set_to_none=True)


def test_it_gives_values_only_with_a_value_head():
    p = Policy.build(ModelConfig(), WORDS, with_value_head=True)
    ids = torch.tensor([[p.bos_id, 5, 6]])
    st = p.token_stats(ids, torch.ones_like(ids), with_values=True)
    assert st.values.shape == (1, 2)


def test_it_loads_a_local_model_directory(tmp_path):
    tok = build_word_tokenizer(WORDS)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    p = Policy.build(ModelConfig(path=str(tmp_path)), [])
    assert p.eoa_id == tok.convert_tokens_to_ids(EOA)
    assert p.decode(p.encode("calc 3")) == "calc 3"


def test_it_names_the_field_for_a_missing_or_bad_model_path(tmp_path):
    with pytest.raises(PolicyError, match="model.path: .* is not a directory"):
        Policy.build(ModelConfig(path=str(tmp_path / "nope")), WORDS)
    with pytest.raises(PolicyError, match="model.path: .* no config.json"):
        Policy.build(ModelConfig(path=str(tmp_path)), WORDS)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(PolicyError, match="model.path: could not load"):
        Policy.build(ModelConfig(path=str(tmp_path)), WORDS)


def test_it_refuses_cuda_when_there_is_none():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(PolicyError, match="model.device"):
        Policy.build(ModelConfig(device="cuda"), WORDS)


def test_columns_past_every_rows_end_are_left_out_of_the_forward(policy):
    """Rows picked from a wider batch (a micro-batch, a scoring chunk) keep its
    width; the forward runs only as wide as their longest row, and each row's
    log-probs, entropies and values are what the row alone gives."""
    g = torch.Generator().manual_seed(0)
    lengths = [4, 6, 5]
    ids = torch.randint(3, 20, (3, 10), generator=g)
    mask = torch.tensor([[1] * n + [0] * (10 - n) for n in lengths])
    widths: list[int] = []
    hook = policy.model.get_decoder().register_forward_pre_hook(
        lambda mod, args, kw: widths.append(kw["input_ids"].shape[1]),
        with_kwargs=True,
    )
    try:
        with torch.no_grad():
            st = policy.token_stats(ids, mask, with_entropy=True, start=1)
            alone = [
                policy.token_stats(ids[i : i + 1, :n], mask[i : i + 1, :n], start=1)
                for i, n in enumerate(lengths)
            ]
    finally:
        hook.remove()
    assert widths[0] == 6
    assert st.logprobs.shape == (3, 9) and st.entropy.shape == (3, 9)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(st.logprobs[i, : n - 1], alone[i].logprobs[0])
        assert (st.logprobs[i, 5:] == 0).all() and (st.entropy[i, 5:] == 0).all()
