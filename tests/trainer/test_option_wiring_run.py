"""Options of sampling, of the optimizer and of the reward's shaping reach the math:
each run through the real loop, checked on what it sampled, what it recorded and
the weights and AdamW state it ended with."""

from __future__ import annotations

import math

import pytest
import torch
from option_registry import covers
from wiring import Ran, initial_policy, run, tiny, tokens, trained

from trainer.events import ListSink
from trainer.runner import run_from_config


@covers("rollout.max_turns", "rollout.max_action_tokens", "rollout.top_p")
def test_sampling_keeps_to_its_turn_and_token_budgets_and_its_nucleus(tmp_path):
    # top_p 1e-6 keeps only the likeliest token: a group's rollouts of one prompt
    # are the same; top_p 1 samples, and they differ.
    cfg = tiny(rollout={"max_turns": 1, "max_action_tokens": 3, "top_p": 1e-6})
    greedy = run(cfg, tmp_path).trajectories()
    lengths = []
    for t in greedy:
        actions = [s for s in t["segments"] if s["kind"] == "action"]
        assert len(actions) == t["num_turns"] == 1
        lengths += [len(s["token_ids"]) for s in actions]
    assert max(lengths) == 3
    groups: dict[int, set] = {}
    for t in greedy:
        groups.setdefault(t["group"], set()).add(tuple(x.id for x in tokens(t)))
    assert all(len(g) == 1 for g in groups.values())
    sampled = run(tiny(rollout={"max_turns": 1, "max_action_tokens": 3}), tmp_path)
    assert len({tuple(x.id for x in tokens(t)) for t in sampled.trajectories()}) > 2


def _adam(ran: Ran) -> list[tuple[str, torch.Tensor, torch.Tensor, dict]]:
    """(name, weights before, weights after, AdamW state) per trained parameter,
    in the optimizer's order."""
    before = initial_policy(ran.config)
    after = ran.weights()
    state = ran.optimizer_state()
    out = []
    named = [(n, p) for n, p in before.named_parameters() if p.requires_grad]
    for i, (name, p) in enumerate(named):
        if name in after and i in state:
            out.append((name, p.detach(), after[name], state[i]))
    return out


@covers(
    "optim.lr",
    "optim.weight_decay",
    "optim.beta1",
    "optim.beta2",
    "optim.grad_clip",
)
def test_one_adamw_step_is_the_one_its_options_say(tmp_path):
    # After one step from zero moments: m = (1 - b1) g, v = (1 - b2) g^2 with g the
    # gradient clipped to norm grad_clip; bias-corrected, the step is lr * g /
    # (|g| + 1e-8) after the decay theta * (1 - lr * wd).
    lr, wd, b1, b2, clip = 2e-3, 0.1, 0.8, 0.9, 0.05
    cfg = tiny(
        optim={
            "lr": lr,
            "weight_decay": wd,
            "beta1": b1,
            "beta2": b2,
            "grad_clip": clip,
        }
    )
    ran = run(cfg, tmp_path)
    for name, before, after, st in _adam(ran):
        assert float(st["step"]) == 1.0, name
        g = st["exp_avg"] / (1 - b1)
        torch.testing.assert_close(st["exp_avg_sq"], (1 - b2) * g * g)
        want = before * (1 - lr * wd) - lr * g / (g.abs() + 1e-8)
        torch.testing.assert_close(after, want, atol=1e-6, rtol=0)
    # Every parameter's gradient (the tied embedding's too, stored under one name).
    norm_sq = math.fsum(
        float(((st["exp_avg"] / (1 - b1)).double() ** 2).sum())
        for st in ran.optimizer_state().values()
    )
    assert ran.metrics()["grad_norm"] > clip  # the clip acted ...
    assert math.sqrt(norm_sq) == pytest.approx(clip, rel=1e-4)  # ... at its bound


@covers("steps", "optim.epochs", "optim.minibatches")
def test_the_optimizer_steps_once_per_minibatch_per_epoch_per_step(tmp_path):
    # 2 steps x 2 epochs x 3 minibatches (of 2 of the 6 rollouts): 12 AdamW steps.
    cfg = tiny(steps=2, optim={"epochs": 2, "minibatches": 3})
    ran = run(cfg, tmp_path)
    assert [e["step"] for e in ran.sink.of_type("step")] == [1, 2]
    assert {float(st["step"]) for *_, st in _adam(ran)} == {12.0}
    # The recorded log-probs are the last epoch's: the policy had moved by then.
    assert any(
        tok.logprob != tok.old_logprob
        for t in ran.trajectories(2)
        for tok in trained(t)
    )


@covers("algorithm.overlong_shaping")
@pytest.mark.parametrize("shaping", [True, False])
def test_overlong_shaping_adds_the_overlong_penalty_to_the_rewards(shaping, tmp_path):
    cfg = tiny(algorithm={"preset": "dapo", "overlong_shaping": shaping})
    sink = ListSink()
    result = run_from_config(cfg, sink)
    assert result.status == "succeeded"
    trajs = sink.of_type("trajectory")
    has = ["overlong_penalty" in t["rewards"]["components"] for t in trajs]
    assert trajs and all(h == shaping for h in has)
    if shaping:  # every action hit its budget: 2 turns x 6 tokens = the whole budget
        penalties = [t["rewards"]["components"]["overlong_penalty"] for t in trajs]
        assert min(penalties) < 0


def out_of_step(monkeypatch, shift) -> None:
    """The sampler's recorded log-probs shifted by ``shift(i, k)`` at token k of an
    action of the i-th task it meets (a task: a first-turn context; later turns
    extend it), the tokens it samples unchanged."""
    from trainer.engines.eager import EagerEngine

    real = EagerEngine.generate
    prompts: list[tuple[int, ...]] = []

    def generate(self, contexts, budgets, **kwargs):
        gen = real(self, contexts, budgets, **kwargs)
        for b, ctx in enumerate(contexts):
            task = next(
                (i for i, p in enumerate(prompts) if tuple(ctx[: len(p)]) == p), None
            )
            if task is None:
                prompts.append(tuple(ctx))
                task = len(prompts) - 1
            gen.logprobs[b] = [
                lp + shift(task, k) for k, lp in enumerate(gen.logprobs[b])
            ]
        return gen

    monkeypatch.setattr(EagerEngine, "generate", generate)


@covers("algorithm.rollout_correction.kind", "algorithm.rollout_correction.cap")
@pytest.mark.parametrize("kind", ["token", "sequence"])
def test_the_correction_caps_the_weights_per_token_or_per_sequence(
    kind, tmp_path, monkeypatch
):
    # A sampler out of step with the learner (ours agree with it to float rounding,
    # ~1e-7, whose sign is the platform's to choose): on the first task's rollouts
    # its recorded log-probs are 1e-3 low on a turn's even tokens and 5e-4 high on
    # its odd ones, on the second task's 1e-3 high. The weights exp(learner -
    # sampler): per token, 1.001 on the first task's even tokens only, so cap 1
    # caps part of each row; per sequence, every row of the first task (its shifts
    # sum below 0) and none of the second, so whole rows. Cap 2 caps nothing.
    out_of_step(
        monkeypatch,
        lambda task, k: (-1e-3 if k % 2 == 0 else 5e-4) if task == 0 else 1e-3,
    )

    def corrected(cap):
        algorithm = {"rollout_correction": {"kind": kind, "cap": cap}}
        return run(tiny(algorithm=algorithm), tmp_path)

    capped = corrected(1.0)
    m = capped.metrics()
    assert 0 < m["rollout_correction/capped_frac"] < 1
    assert m["rollout_correction/weight_mean"] <= 1.0
    assert corrected(2.0).metrics()["rollout_correction/capped_frac"] == 0.0
    lengths = [len(trained(t)) for t in capped.trajectories()]
    n = sum(lengths)
    sums = {0}
    for length in lengths:
        sums |= {s + length for s in sums}
    frac = m["rollout_correction/capped_frac"]
    whole_rows = min(abs(frac - s / n) for s in sums) < 1e-6
    # Per sequence the capped tokens make up whole rows; per token they do not.
    assert whole_rows == (kind == "sequence")
