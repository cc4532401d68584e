"""Options of the advantage and the loss reach the math: each run through
``trainer.loop.train``, its recorded numbers checked against the option's meaning
worked out from what the run recorded (rewards, per-token log-probs, ratios,
advantages, entropies)."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from option_registry import covers
from wiring import (
    by_group,
    initial_policy,
    run,
    seq_mean,
    tiny,
    token_mean,
    tokens,
    trained,
    values_of,
    zero_reward,
)

from trainer.algorithms import PRESETS, describe_preset


@covers(
    "algorithm.std_scaling",
    "algorithm.eps",
    "rollout.group_size",
    "rollout.tasks_per_step",
)
@pytest.mark.parametrize("scaling", ["group", "batch", "none"])
def test_group_advantages_are_scaled_as_std_scaling_and_eps_say(scaling, tmp_path):
    # 3 tasks of 2 rollouts; eps 0.5 (not the default) so a wrong eps shows.
    eps = 0.5
    cfg = tiny(
        rollout={"tasks_per_step": 3, "group_size": 2},
        algorithm={"std_scaling": scaling, "eps": eps},
    )
    groups = by_group(run(cfg, tmp_path).trajectories())
    assert len(groups) == 3 and all(len(g) == 2 for g in groups.values())
    everyone = [t["reward"] for g in groups.values() for t in g]
    assert len(set(everyone)) > 1
    for g in groups.values():
        rewards = [t["reward"] for t in g]
        mean = math.fsum(rewards) / len(rewards)
        div = {
            "group": statistics.stdev(rewards) + eps,
            "batch": statistics.stdev(everyone) + eps,
            "none": 1.0,
        }[scaling]
        for t, r in zip(g, rewards, strict=True):
            assert t["advantage"] == pytest.approx((r - mean) / div, abs=1e-5)
            for tok in trained(t):  # outcome credit: one advantage per rollout
                assert tok.advantage == pytest.approx(t["advantage"], abs=1e-6)


def _rows(trajs, value):
    return [[value(tok) for tok in trained(t)] for t in trajs]


@covers("algorithm.agg", "algorithm.loss", "rollout.max_total_tokens")
@pytest.mark.parametrize(
    ("loss", "agg"),
    [
        ("ppo_clip", "token_mean"),
        ("ppo_clip", "seq_mean_token_mean"),
        ("ppo_clip", "seq_mean_token_sum_norm"),
        ("cispo", "token_mean"),
    ],
)
def test_the_policy_loss_is_the_loss_and_aggregation_asked_for(loss, agg, tmp_path):
    # Two epochs; the metric is their mean. The first sees ratio 1 (the recorded
    # old log-probs), the second the recorded ratios and log-probs. Per token:
    # ppo_clip -min(r A, clip(r) A), cispo -clip(r) A log pi (the weight without
    # gradient). The aggregation is over the recorded trained tokens; the token sum
    # is normalised by B * max_total_tokens (Dr. GRPO's constant).
    lo = hi = 0.2
    cfg = tiny(
        algorithm={"loss": loss, "agg": agg, "clip_low": lo, "clip_high": hi},
        rollout={"max_total_tokens": 300},
        optim={"epochs": 2},
    )
    ran = run(cfg, tmp_path)
    trajs = ran.trajectories()

    def token_loss(r: float, a: float, logp: float) -> float:
        clipped = min(max(r, 1 - lo), 1 + hi)
        if loss == "cispo":
            return -clipped * a * logp
        return -min(r * a, clipped * a)

    aggregate = {
        "token_mean": token_mean,
        "seq_mean_token_mean": seq_mean,
        "seq_mean_token_sum_norm": lambda r: (
            math.fsum(map(math.fsum, r)) / (len(r) * 300)
        ),
    }[agg]
    first = aggregate(
        _rows(trajs, lambda t: token_loss(1.0, t.advantage, t.old_logprob))
    )
    second = aggregate(
        _rows(trajs, lambda t: token_loss(t.ratio, t.advantage, t.logprob))
    )
    assert abs(second) > 1e-4
    want = (first + second) / 2
    assert ran.metrics()["policy_loss"] == pytest.approx(want, abs=1e-6)


@covers("algorithm.entropy_coef")
def test_the_entropy_bonus_is_subtracted_from_the_loss(tmp_path):
    coef = 0.3
    ran = run(tiny(algorithm={"entropy_coef": coef}), tmp_path)
    m = ran.metrics()
    entropy = seq_mean(_rows(ran.trajectories(), lambda tok: tok.entropy))
    assert m["loss"] == pytest.approx(m["policy_loss"] - coef * entropy, abs=1e-5)


@covers("algorithm.entropy_coef", "algorithm.top_entropy_quantile")
def test_with_a_top_entropy_mask_the_bonus_weighs_the_masked_tokens_zero(tmp_path):
    # As the policy loss weighs them: a low-entropy token adds 0 to its sequence's
    # bonus and still counts in its length (so parts of a batch add up).
    coef = 0.3
    cfg = tiny(algorithm={"entropy_coef": coef, "top_entropy_quantile": 0.5})
    ran = run(cfg, tmp_path)
    m = ran.metrics()
    rows = []
    for t in ran.trajectories():
        row = []
        for seg in t["segments"]:
            if seg["mask"] is None:  # trained; "masked": [k, reason], token k
                low = {k for k, why in seg["masked"] if why == "low_entropy"}
                row += [0.0 if k in low else e for k, e in enumerate(seg["entropy"])]
        rows.append(row)
    assert any(0.0 in r for r in rows)  # some trained tokens were masked
    assert m["loss"] == pytest.approx(
        m["policy_loss"] - coef * seq_mean(rows), abs=1e-5
    )


@covers("algorithm.clip_low", "algorithm.clip_high", "algorithm.dual_clip")
def test_the_clip_bounds_and_dual_clip_act_where_their_ratios_say(tmp_path):
    # Two epochs: the first sees ratio 1 (nothing clipped), the second the recorded
    # ratios; the metrics are the mean of the two epochs. TRL's definitions: low
    # clipped r < 1 - lo with A < 0, high r > 1 + hi with A > 0; dual clip caps
    # r > c (r floored at 1 - lo) with A < 0.
    lo, hi, c = 0.01, 0.02, 1.03
    cfg = tiny(
        algorithm={"clip_low": lo, "clip_high": hi, "dual_clip": c},
        optim={"epochs": 2},
    )
    ran = run(cfg, tmp_path)
    toks = [tok for t in ran.trajectories() for tok in trained(t)]
    by_token = {
        "low": [tok.ratio < 1 - lo and tok.advantage < 0 for tok in toks],
        "high": [tok.ratio > 1 + hi and tok.advantage > 0 for tok in toks],
        "dual": [max(tok.ratio, 1 - lo) > c and tok.advantage < 0 for tok in toks],
    }
    m = ran.metrics()
    for name, flags in by_token.items():
        assert any(flags), name  # each bound acted somewhere
        want = sum(flags) / len(flags) / 2
        assert m[f"clip_ratio/{name}_mean"] == pytest.approx(want, abs=1e-6), name


@covers("algorithm.credit")
def test_process_credit_gives_each_step_its_normalised_rewards_to_go(tmp_path):
    # A token's advantage: the sum over its step and the later ones of the step
    # rewards normalised within the group ((r - mean) / (std + eps), every step
    # reward of the group's rollouts).
    cfg = tiny(algorithm={"credit": "process"})
    for g in by_group(run(cfg, tmp_path).trajectories()).values():
        steps = [t["rewards"]["per_step"]["shape"] for t in g]
        flat = [r for s in steps for r in s]
        mean, std = math.fsum(flat) / len(flat), statistics.stdev(flat)
        varied = False
        for t, s in zip(g, steps, strict=True):
            norm = [(r - mean) / (std + 1e-4) for r in s]
            for tok in trained(t):
                want = math.fsum(norm[tok.turn :])
                assert tok.advantage == pytest.approx(want, abs=1e-5)
            varied |= len({round(x, 6) for x in norm}) > 1
        assert varied


@covers(
    "algorithm.advantage", "algorithm.gamma", "algorithm.lam", "algorithm.value_coef"
)
def test_gae_advantages_follow_gamma_and_lam_over_the_critics_values(tmp_path):
    # PPO's GAE over each rollout's trained tokens: a step's reward on its last
    # token, delta_t = r_t + gamma V_{t+1} - V_t (V after the last = 0), A_t =
    # sum_k (gamma lam)^k delta_{t+k}, then whitened over the batch's tokens. The
    # values are the initial critic's (the one that scored the rollouts).
    gamma, lam, vc = 0.9, 0.7, 0.25
    cfg = tiny(
        algorithm={"preset": "ppo", "gamma": gamma, "lam": lam, "value_coef": vc}
    )
    ran = run(cfg, tmp_path)
    critic = initial_policy(cfg)
    raw, got = [], []
    for t in ran.trajectories():
        toks = trained(t)
        all_values = values_of(critic, t)
        positions = [i for i, tok in enumerate(tokens(t)) if tok.trained]
        values = [all_values[i] for i in positions] + [0.0]
        per_step = t["rewards"]["per_step"]["shape"]
        rewards = [
            per_step[tok.turn]
            if k + 1 == len(toks) or toks[k + 1].turn != tok.turn
            else 0.0
            for k, tok in enumerate(toks)
        ]
        adv, acc = [0.0] * len(toks), 0.0
        for k in reversed(range(len(toks))):
            delta = rewards[k] + gamma * values[k + 1] - values[k]
            acc = delta + gamma * lam * acc
            adv[k] = acc
        raw += adv
        got += [tok.advantage for tok in toks]
    mean = math.fsum(raw) / len(raw)
    std = math.sqrt(math.fsum((a - mean) ** 2 for a in raw) / len(raw))
    want = [(a - mean) / (std + 1e-4) for a in raw]
    assert got == pytest.approx(want, abs=2e-3)
    m = ran.metrics()
    assert m["loss"] == pytest.approx(m["policy_loss"] + vc * m["value_loss"], abs=1e-5)


@covers("algorithm.group_filter", "algorithm.max_resample_rounds")
def test_zero_variance_groups_are_dropped_and_resampled_up_to_the_round_cap(
    tmp_path,
):
    # Every reward 0: every group has zero variance. Dropping them, the step samples
    # its 2 tasks, then 2 more in each of the 3 extra rounds: 8 groups, all dropped,
    # nothing trained.
    cfg = tiny(
        algorithm={"group_filter": "drop_zero_variance", "max_resample_rounds": 3}
    )
    ran = run(cfg, tmp_path, reward_fn=zero_reward)
    trajs = ran.trajectories()
    assert len({t["group"] for t in trajs}) == 8 and all(t["dropped"] for t in trajs)
    m = ran.metrics()
    assert m["groups_dropped"] == 8 and "grad_norm" not in m
    kept = run(tiny(algorithm={"group_filter": "off"}), tmp_path, reward_fn=zero_reward)
    trajs = kept.trajectories()
    assert len({t["group"] for t in trajs}) == 2
    assert not any(t["dropped"] for t in trajs) and "grad_norm" in kept.metrics()


@covers("algorithm.preset")
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_preset_trains_exactly_as_its_fields_set_by_hand(preset, tmp_path):
    fields = describe_preset(preset)
    by_hand = run(tiny(algorithm={"preset": "grpo", **fields}), tmp_path)
    ran = run(tiny(algorithm={"preset": preset}), tmp_path)
    skip = ("timing_s/", "perf/")

    def numbers(r):
        return {k: v for k, v in r.metrics().items() if not k.startswith(skip)}

    assert numbers(ran) == numbers(by_hand)
    assert ran.weights().keys() == by_hand.weights().keys()
    assert all(
        torch.equal(a, b)
        for a, b in zip(ran.weights().values(), by_hand.weights().values(), strict=True)
    )
