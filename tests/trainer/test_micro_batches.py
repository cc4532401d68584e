"""``optim.micro_batch_size``: a minibatch's forward and backward in micro-batches
whose gradients add up to the whole minibatch's, through the real loop: the same
weights, losses, gradient norms and recorded log-probs as one forward, for every
loss aggregation, the KL and value terms, the top-entropy mask (its threshold over
the whole minibatch) and several epochs and minibatches; and no forward of the
update holding more than a micro-batch's rows."""

from __future__ import annotations

import math

import pytest
import torch
from option_registry import covers
from wiring import run, tiny

import trainer.policy
from trainer.accumulate import Part, loss_scales, normalisers, plan
from trainer.distributed import combine_metrics
from trainer.single import Single

# Update metrics compared between the whole and the micro-batched run: everything
# but time and throughput.
SKIP = ("timing_s/", "perf/", "tokens_per_s")

SCENARIOS = {
    "grpo": {},  # seq_mean_token_mean, on-policy: the first forward fills old log-probs
    "token_mean_kl": {"algorithm": {"agg": "token_mean", "kl_beta": 0.1}},
    "dr_grpo": {"algorithm": {"preset": "dr_grpo"}},
    "ppo": {"algorithm": {"preset": "ppo"}},
    "top_entropy_epochs": {
        "algorithm": {"top_entropy_quantile": 0.5, "entropy_coef": 0.01},
        "optim": {"epochs": 2},
    },
    "minibatches": {"optim": {"minibatches": 2}},
    # The entropy bonus under the top-entropy mask: its shares add up too.
    "entropy_bonus_top_entropy": {
        "algorithm": {
            "agg": "token_mean",
            "top_entropy_quantile": 0.2,
            "entropy_coef": 1.0,
        },
    },
}


def _config(name: str, size: int, steps: int = 2):
    over = {k: dict(v) for k, v in SCENARIOS[name].items()}
    over["optim"] = {**over.get("optim", {}), "micro_batch_size": size}
    return tiny(steps=steps, **over)


@pytest.fixture
def training_rows(monkeypatch):
    """The rows of every forward the update runs with gradients (in order)."""
    seen: list[int] = []
    real = trainer.policy.Policy.token_stats

    def spy(self, input_ids, *a, **kw):
        if torch.is_grad_enabled() and self.training:
            seen.append(int(input_ids.shape[0]))
        return real(self, input_ids, *a, **kw)

    monkeypatch.setattr(trainer.policy.Policy, "token_stats", spy)
    return seen


@pytest.fixture(scope="module")
def tiny_init():
    """The weights every run starts from (the same seed, the same build)."""
    from wiring import initial_policy

    return {
        k: v.detach().clone() for k, v in initial_policy(tiny()).state_dict().items()
    }


def _close(a: float, b: float, rel: float = 1e-4, abs_: float = 1e-6) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


@covers("optim.micro_batch_size")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_micro_batches_train_as_the_whole_minibatch(
    name, tmp_path, training_rows, tiny_init
):
    whole = run(_config(name, 0), tmp_path)
    rows_whole = list(training_rows)
    training_rows.clear()
    micro = run(_config(name, 2), tmp_path)
    # 6 rollouts a step: 6 (or 3 per minibatch) rows a forward, then at most 2.
    cfg = whole.config
    per_mb = 6 // cfg.optim.minibatches
    updates = cfg.steps * cfg.optim.epochs * cfg.optim.minibatches
    assert rows_whole == [per_mb] * updates
    assert max(training_rows) == 2
    assert sum(training_rows) == sum(rows_whole)
    assert len(training_rows) == updates * -(-per_mb // 2)
    _assert_same_training(whole, micro, tiny_init)


def _assert_same_training(whole, micro, tiny_init) -> None:
    """Two runs of one config but for how the update splits its minibatches: the
    same rewards, metrics, weights, gradients and recorded arrays."""
    for a, b in zip(whole.every_metrics(), micro.every_metrics(), strict=True):
        assert b["reward"] == a["reward"]  # step 2 sampled the same tokens
        keys = {k for k in a if not k.startswith(SKIP)}
        assert keys == {k for k in b if not k.startswith(SKIP)}
        bad = {k: (a[k], b[k]) for k in keys if not _close(a[k], b[k])}
        assert not bad, bad
    want, got = whole.weights(), micro.weights()
    common = want.keys() & tiny_init.keys()  # (a tied embedding is saved once)
    assert len(common) >= len(tiny_init) - 1
    moved = max(float((want[k] - tiny_init[k]).abs().max()) for k in common)
    assert moved > 1e-3  # the update did move the weights: equality is not trivial
    for k, w in want.items():
        torch.testing.assert_close(got[k], w, atol=1e-4, rtol=0)
    # The gradients themselves (AdamW's first moment: a sum of the steps'), to
    # float rounding; the weights above only to where AdamW's step, whose size
    # does not depend on the gradient's, left a gradient of about 0 differing.
    adam_w, adam_m = whole.optimizer_state(), micro.optimizer_state()
    assert adam_w.keys() == adam_m.keys()
    for i, st in adam_w.items():
        m = st["exp_avg"]
        scale = float(m.abs().max())
        torch.testing.assert_close(
            adam_m[i]["exp_avg"], m, rtol=1e-3, atol=3e-4 * scale
        )
    for step in (1, 2):
        for ta, tb in zip(
            whole.trajectories(step), micro.trajectories(step), strict=True
        ):
            for sa, sb in zip(ta["segments"], tb["segments"], strict=True):
                for arr in ("logprob", "old_logprob", "entropy", "advantage"):
                    xa = [x for x in sa[arr] if x is not None]
                    xb = [x for x in sb[arr] if x is not None]
                    assert len(xa) == len(xb)
                    assert all(
                        _close(x, y, 1e-4, 1e-5) for x, y in zip(xa, xb, strict=True)
                    )


def test_scoring_forwards_go_no_wider_than_a_micro_batch(tmp_path, monkeypatch):
    # Two epochs: the old log-probs come from a scoring pass (no gradients), and
    # the KL term's reference scores the batch too.
    seen: list[int] = []
    real = trainer.policy.Policy.token_stats

    def spy(self, input_ids, *a, **kw):
        if not torch.is_grad_enabled():
            seen.append(int(input_ids.shape[0]))
        return real(self, input_ids, *a, **kw)

    monkeypatch.setattr(trainer.policy.Policy, "token_stats", spy)
    over = {"algorithm": {"kl_beta": 0.1}, "optim": {"epochs": 2}}
    run(tiny(**over), tmp_path)
    assert max(seen) == 6  # the whole batch in one scoring forward
    seen.clear()
    run(tiny(**{**over, "optim": {"epochs": 2, "micro_batch_size": 4}}), tmp_path)
    assert seen and max(seen) == 4


def test_a_micro_batch_size_over_the_minibatch_is_one_forward(tmp_path, training_rows):
    run(tiny(optim={"micro_batch_size": 64}), tmp_path)
    assert training_rows == [6]


class _Ranks(Single):
    """A rank among two whose other rank has ``other`` micro-batches."""

    def __init__(self, other: int) -> None:
        super().__init__()
        self.world, self.other = 2, other

    def all_gather_ints(self, value: int) -> list[int]:
        return [int(value), self.other]


def test_every_rank_runs_as_many_micro_batches_blanks_filling_in():
    parts = plan(_Ranks(other=2), rows=5, size=2)  # 3 here, 2 there: 3 each
    assert [p.rows.tolist() for p in parts] == [[0, 1], [2, 3], [4]]
    assert not any(p.blank for p in parts)
    parts = plan(_Ranks(other=3), rows=3, size=2)  # 2 here, 3 there
    assert [p.blank for p in parts] == [False, False, True]
    assert parts[2].rows.tolist() == [0]
    parts = plan(_Ranks(other=2), rows=1, size=2, blank=True)  # an empty share
    assert [(p.rows, p.blank) for p in parts] == [(None, True), (None, True)]
    assert plan(Single(), rows=5, size=0) == [Part(None)]
    assert plan(Single(), rows=2, size=2) == [Part(None)]


def test_parts_losses_add_up_to_the_whole_minibatchs_normaliser():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]])
    whole = normalisers(mask)
    assert whole == [6.0, 3.0, 4.0]
    tops, bottoms = normalisers(mask[:2]), normalisers(mask[2:])
    for agg in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        one, two = loss_scales(tops, whole)[agg], loss_scales(bottoms, whole)[agg]
        assert one + two == pytest.approx(1.0)
    assert loss_scales(whole, whole) == dict.fromkeys(
        ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"), 1.0
    )
    assert normalisers(mask, blank=True) == [0.0, 0.0, 0.0]


def test_metrics_of_parts_combine_by_their_trained_tokens():
    parts = [
        ({"loss": 0.25, "clip_frac": 0.5, "ratio/max": 1.2}, 2.0),
        ({"loss": 0.5, "clip_frac": 0.0, "ratio/max": 1.1}, 6.0),
    ]
    out = combine_metrics(parts)
    assert out == {"loss": 0.75, "clip_frac": 0.125, "ratio/max": 1.2}
    one = {"clip_frac": 0.1}
    assert combine_metrics([(one, 3.0)]) == one  # one part: its own, as they are
    # A part with nothing trained reports a placeholder (ratio 1.0): not a maximum.
    empty = ({"ratio/max": 1.0, "ratio/min": 1.0, "loss": 0.0}, 0.0)
    full = ({"ratio/max": 0.9, "ratio/min": 0.8, "loss": 0.5}, 4.0)
    assert combine_metrics([empty, full]) == {
        "ratio/max": 0.9,
        "ratio/min": 0.8,
        "loss": 0.5,
    }
    # Weights by name prefix: the sampler correction's means are over the tokens
    # with a sampler log-prob, the rest over the trained tokens.
    a = (
        {"rollout_correction/weight_mean": 0.5, "clip_frac": 0.0},
        {"": 4.0, "rollout_correction/": 6.0},
    )
    b = (
        {"rollout_correction/weight_mean": 1.0, "clip_frac": 1.0},
        {"": 4.0, "rollout_correction/": 0.0},
    )
    c = (
        {"rollout_correction/weight_mean": 0.8, "clip_frac": 0.5},
        {"": 2.0, "rollout_correction/": 2.0},
    )
    out = combine_metrics([a, b, c])
    assert out["rollout_correction/weight_mean"] == pytest.approx(
        (0.5 * 6 + 0.8 * 2) / 8
    )
    assert out["clip_frac"] == pytest.approx((0.0 * 4 + 1.0 * 4 + 0.5 * 2) / 10)


def test_micro_batches_keep_a_prompts_rows_together_shortest_first(monkeypatch):
    from trainer import accumulate
    from trainer.batch import Batch
    from trainer.rows import Prefixes

    lengths = [5, 3, 2, 4]
    T = 6
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
    batch = Batch(
        input_ids=torch.zeros((4, T), dtype=torch.long),
        attention_mask=mask,
        loss_mask=torch.zeros((4, T - 1)),
        step_of=torch.zeros((4, T - 1), dtype=torch.long),
        prefixes=Prefixes(
            ids=torch.zeros((2, 1), dtype=torch.long),
            mask=torch.ones((2, 1), dtype=torch.long),
            of_row=torch.tensor([1, 0, 1, 0]),
            length=torch.ones(4, dtype=torch.long),
        ),
    )
    # Prompt 0's rows (1: 3 tokens, 3: 4), then prompt 1's (2: 2, 0: 5).
    assert accumulate.by_length(batch).tolist() == [1, 3, 2, 0]
    batch.prefixes = None  # no shared prompt: by length alone
    assert accumulate.by_length(batch).tolist() == [2, 1, 3, 0]
    parts = plan(Single(), rows=4, size=2, order=accumulate.by_length(batch))
    assert [p.rows.tolist() for p in parts] == [[2, 1], [3, 0]]
    monkeypatch.setattr(accumulate, "GROUPED", False)
    assert accumulate.by_length(batch) is None


@pytest.fixture
def training_forwards(monkeypatch):
    """(rows, longest row, every row's length) of every forward the update runs
    with gradients."""
    seen: list[tuple[int, int, list[int]]] = []
    real = trainer.policy.Policy.token_stats

    def spy(self, input_ids, attention_mask, *a, **kw):
        if torch.is_grad_enabled() and self.training:
            lengths = attention_mask.sum(1).tolist()
            seen.append((int(input_ids.shape[0]), max(lengths), lengths))
        return real(self, input_ids, attention_mask, *a, **kw)

    monkeypatch.setattr(trainer.policy.Policy, "token_stats", spy)
    return seen


@covers("optim.micro_batch_tokens")
@pytest.mark.parametrize("name", ["grpo", "token_mean_kl", "top_entropy_epochs"])
def test_a_token_budget_trains_as_the_whole_minibatch(
    name, tmp_path, training_forwards, tiny_init
):
    """``optim.micro_batch_tokens``: no training forward holds more than the budget
    (its rows times its longest) unless it is one rollout, more rows go together
    where they are shorter, and the update is the whole minibatch's."""
    whole = run(_config(name, 0), tmp_path)
    lengths = sorted(n for _, _, rows in training_forwards for n in rows)
    training_forwards.clear()
    budget = 3 * lengths[len(lengths) // 2]  # about 3 rollouts a forward
    over = {k: dict(v) for k, v in SCENARIOS[name].items()}
    over["optim"] = {**over.get("optim", {}), "micro_batch_tokens": budget}
    micro = run(tiny(steps=2, **over), tmp_path)
    assert all(rows * n <= budget or rows == 1 for rows, n, _ in training_forwards)
    assert max(rows for rows, _, _ in training_forwards) > 1  # short ones together
    cfg = whole.config
    updates = cfg.steps * cfg.optim.epochs * cfg.optim.minibatches
    assert len(training_forwards) > updates  # split
    assert sum(rows for rows, _, _ in training_forwards) == 6 * updates
    _assert_same_training(whole, micro, tiny_init)


def test_a_token_budget_packs_rows_in_order_up_to_rows_times_the_longest():
    from trainer.accumulate import _split

    lengths = torch.tensor([4, 2, 3, 9, 3, 1])
    order = torch.tensor([5, 1, 2, 4, 0, 3])  # shortest first: 1, 2, 3, 3, 4, 9
    got = _split(6, 0, order, lengths, tokens=12)
    # 1, 2, 3 (3 x 3 = 9); + 3 would be 4 x 3 = 12: in; + 4 would be 5 x 4: out
    assert [g.tolist() for g in got] == [[5, 1, 2, 4], [0], [3]]
    # Both limits: at most 2 rows as well.
    got = _split(6, 2, order, lengths, tokens=12)
    assert [g.tolist() for g in got] == [[5, 1], [2, 4], [0], [3]]
    assert _split(6, 0, order, lengths, tokens=100) == [None]  # all fit: whole
    parts = plan(
        _Ranks(other=5), rows=6, size=0, order=order, lengths=lengths, tokens=12
    )
    assert [p.blank for p in parts] == [False, False, False, True, True]
