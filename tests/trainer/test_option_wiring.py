"""Options reach the math: the critic's value clip, the truncation mask, the KL terms
(in the loss, in the reward, clamped, adaptive) and the sampling temperature, each
shown through ``trainer.loop.train`` on what was trained or recorded.

Each of these was a wiring break that passed the suite while the functions it calls
were tested (issue 23): the option never reaching the critic, a mask that masked
nothing, a flipped sign, an ignored clamp, a sampler scoring at T = 1.
"""

from __future__ import annotations

import math

import pytest
import torch
from option_registry import covers
from wiring import (
    initial_policy,
    logprobs_of,
    run,
    seq_mean,
    tiny,
    tokens,
    trained,
    varied_reward,
)

from rewards.types import RewardResult
from trainer.algorithms import resolve_algorithm
from trainer.checkpoint import TrainState
from trainer.config import AlgorithmConfig
from trainer.kl_control import kl_step
from trainer.scoring import Scores


def _max_diff(a, b) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----- the critic's value clip ---------------------------------------------------
@pytest.mark.slow
@covers("algorithm.value_clip")
def test_the_value_clip_reaches_the_critic(tmp_path):
    # Two epochs: in the first V == V_old and no clip acts; in the second the critic
    # has moved (towards its targets, at a small learning rate) by more than 1e-7
    # and by far less than 1000. A huge clip trains exactly as no clip; a tight one
    # keeps the clipped (larger) error and trains differently. "Exactly" up to the
    # last bit of a few values: where V - V_old is not exact in floating point
    # (V crossed zero), V_old + (V - V_old) is V to rounding, not bit for bit.
    def ppo(clip):
        cfg = tiny(
            algorithm={"preset": "ppo", "value_clip": clip},
            optim={"epochs": 2, "lr": 1e-5},
        )
        return run(cfg, tmp_path)

    off, huge, tight = ppo(0), ppo(1000), ppo(1e-7)
    assert huge.metrics()["value_loss"] == off.metrics()["value_loss"]
    assert _max_diff(huge.weights(), off.weights()) < 1e-7
    assert tight.metrics()["value_loss"] > off.metrics()["value_loss"]
    assert _max_diff(tight.weights(), off.weights()) > 1e-6


# ----- masking truncated rollouts ------------------------------------------------
def _swap_truncated(group_size: int):
    """``varied_reward`` with the rewards of each group's truncated rollouts rotated
    among them: the group's mean and std stay, so only the truncated rollouts'
    advantages change."""

    def reward_fn(episodes, step):
        out = varied_reward(episodes, step)
        for g in range(0, len(out), group_size):
            idx = [
                g + i for i in range(group_size) if episodes[g + i].facts["truncated"]
            ]
            rotated = idx[1:] + idx[:1]
            moved: list[RewardResult] = [out[j] for j in rotated]
            for i, res in zip(idx, moved, strict=True):
                out[i] = res
        return out

    return reward_fn


@covers("algorithm.mask_truncated")
def test_truncated_rollouts_get_the_reason_truncated_and_no_gradient(tmp_path):
    def pair(mask):
        cfg = tiny(algorithm={"preset": "dr_grpo", "mask_truncated": mask})
        return (
            run(cfg, tmp_path),
            run(cfg, tmp_path, reward_fn=_swap_truncated(cfg.rollout.group_size)),
        )

    masked, masked_swapped = pair(True)
    trajs = masked.trajectories()
    assert any(t["truncated"] for t in trajs)
    swapped = {}
    for t in trajs:
        actions = [s for s in t["segments"] if s["kind"] == "action"]
        assert {s["mask"] for s in actions} == {"truncated" if t["truncated"] else None}
        if t["truncated"]:
            assert all(x == 0.0 for s in actions for x in s["advantage"])
        swapped[(t["group"], t["index"])] = t["reward"]
    # The swap did change some truncated rollout's reward ...
    other = {
        (t["group"], t["index"]): t["reward"] for t in masked_swapped.trajectories()
    }
    assert other != swapped
    # ... and masked, the update cannot tell; unmasked, it can.
    assert _same_weights(masked.weights(), masked_swapped.weights())
    plain, plain_swapped = pair(False)
    assert not _same_weights(plain.weights(), plain_swapped.weights())


# ----- KL ------------------------------------------------------------------------
def _k(kind: str, d: float) -> float:
    return {"k1": d, "k2": d * d / 2, "k3": math.exp(-d) + d - 1}[kind]


def _expected_kl(ran, step: int, kind: str, clamp: float | None) -> float:
    """The loss's KL worked out from the recorded log-probs of the learner and the
    reference (the policy RL started from), aggregated as GRPO does."""
    ref = initial_policy(ran.config)
    rows = []
    for t in ran.trajectories(step):
        ref_lp = logprobs_of(ref, t)
        row = []
        for tok, r in zip(tokens(t), ref_lp, strict=True):
            if tok.trained:
                k = _k(kind, tok.logprob - r)
                if clamp is not None and kind == "k3":
                    k = min(max(k, -clamp), clamp)
                row.append(k)
        rows.append(row)
    return seq_mean(rows)


def _drifting(steps: int = 2, **algorithm):
    """Steps at a high learning rate: the policy drifts from its reference."""
    return tiny(steps=steps, algorithm=algorithm, optim={"lr": 0.05})


@covers("algorithm.kl_kind")
@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_the_kl_kind_is_the_estimator_of_the_loss(kind, tmp_path):
    ran = run(_drifting(kl_beta=1e-3, kl_kind=kind, kl_clamp=None), tmp_path)
    kl = ran.metrics(2)["kl"]  # step 2: the policy has drifted from the reference
    assert abs(kl) > 1e-3
    assert kl == pytest.approx(_expected_kl(ran, 2, kind, None), abs=2e-5)


@covers("algorithm.kl_clamp")
def test_the_kl_clamp_bounds_the_loss_of_a_diverged_policy(tmp_path):
    clamp = 0.01
    clamped = run(_drifting(kl_beta=1e-3, kl_clamp=clamp), tmp_path)
    free = run(_drifting(kl_beta=1e-3, kl_clamp=None), tmp_path)
    # Step 1: KL 0 in both, the same update; step 2 samples alike.
    assert free.metrics(2)["kl"] > 10 * clamp
    m = clamped.metrics(2)
    assert 0 < m["kl"] <= clamp
    assert m["kl"] == pytest.approx(_expected_kl(clamped, 2, "k3", clamp))
    assert m["loss"] - m["policy_loss"] <= 1e-3 * clamp + 1e-7


@covers("algorithm.kl_beta")
def test_kl_beta_weighs_the_kl_in_the_loss(tmp_path):
    beta = 0.5
    ran = run(_drifting(kl_beta=beta), tmp_path)
    m = ran.metrics(2)
    assert m["kl"] > 1e-3 and m["kl/coef"] == beta
    assert m["loss"] == pytest.approx(m["policy_loss"] + beta * m["kl"], abs=1e-6)
    assert "kl" not in run(_drifting(kl_beta=0.0), tmp_path).metrics(2)


@covers("algorithm.kl_in_reward")
def test_kl_in_the_reward_lowers_each_reward_by_beta_times_its_kl(tmp_path):
    # Dr. GRPO's advantage is R - mean(group R): with the penalty, R is the recorded
    # reward minus beta * (the rollout's summed k3 against the reference).
    beta = 0.5
    ran = run(_drifting(preset="dr_grpo", kl_beta=beta, kl_in_reward=True), tmp_path)
    ref = initial_policy(ran.config)
    G = ran.config.rollout.group_size
    trajs = sorted(ran.trajectories(2), key=lambda t: (t["group"], t["index"]))
    penalised, kls = [], []
    for t in trajs:
        kl = math.fsum(  # k3 clamped to the default kl_clamp of 10
            min(_k("k3", tok.old_logprob - r), 10.0)
            for tok, r in zip(tokens(t), logprobs_of(ref, t), strict=True)
            if tok.trained
        )
        kls.append(kl)
        penalised.append(t["reward"] - beta * kl)
    assert max(kls) > 1e-2  # the policy drifted
    for g in range(0, len(trajs), G):
        mean = math.fsum(penalised[g : g + G]) / G
        for t, p in zip(trajs[g : g + G], penalised[g : g + G], strict=True):
            assert t["advantage"] == pytest.approx(p - mean, abs=1e-4)


@covers("algorithm.kl_target", "algorithm.kl_horizon")
@pytest.mark.parametrize("horizon", [None, 50])
def test_the_adaptive_coefficient_moves_by_the_samples_of_each_step(horizon, tmp_path):
    # verl's AdaptiveKLController: e = clip(kl / target - 1, -.2, .2), coef *= 1 +
    # e * n / horizon with n the step's samples (2 tasks x 3 = 6). At the default
    # horizon 10000 a step far from the target moves it by 6 * .2 / 10000 = 1.2e-4.
    target = 1e-3
    algorithm = {"kl_beta": 0.1, "kl_target": target}
    if horizon is not None:
        algorithm["kl_horizon"] = horizon
    ran = run(_drifting(3, **algorithm), tmp_path)
    h = horizon or 10_000
    steps = ran.every_metrics()
    assert steps[0]["kl"] == 0.0  # policy = reference: below the target, e = -.2
    assert steps[1]["kl/coef"] == pytest.approx(0.1 * (1 - 0.2 * 6 / h), rel=1e-9)
    for now, then in zip(steps, steps[1:], strict=False):
        e = min(max(now["kl"] / target - 1, -0.2), 0.2)
        want = now["kl/coef"] * (1 + e * 6 / h)
        assert then["kl/coef"] == pytest.approx(want, rel=1e-9)
    assert steps[1]["kl"] > 1.2 * target  # above it: the coefficient grows back
    assert steps[2]["kl/coef"] > steps[1]["kl/coef"]


def test_at_verls_defaults_ten_times_the_target_for_300_steps_moves_it_47_percent():
    # The loop's KL stage with 64 samples a step and kl_horizon at its default
    # (10000): (1 + .2 * 64 / 10000) ** 300 = 1.00128 ** 300 = 1.4678.
    algo = resolve_algorithm(AlgorithmConfig(kl_beta=0.1, kl_target=0.01))
    assert algo.kl_horizon == 10_000
    state = TrainState(step=0, task_rng=None, sample_gen=None)
    scores = Scores(None, None, None, torch.zeros(1, 1), kl_beta=0.1)
    for _ in range(300):
        kl_step(algo, state, scores, 0.1, 64)
        scores.kl_beta = state.kl_coef
    assert state.kl_coef / 0.1 == pytest.approx(1.00128**300, rel=1e-9)
    assert state.kl_coef / 0.1 == pytest.approx(1.4678, abs=1e-4)


# ----- sampling temperature ------------------------------------------------------
@covers("rollout.temperature")
@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_the_sampler_and_the_learner_score_at_the_same_temperature(
    temperature, tmp_path
):
    ran = run(tiny(rollout={"temperature": temperature}), tmp_path)
    m = ran.metrics()
    # The sampler's log-probs (what importance weights divide by) are the learner's.
    assert m["rollout/logprob_diff"] < 1e-4
    assert m["rollout/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["ratio/mean"] == 1.0  # the first minibatch sees the sampling policy
    at_t = initial_policy(ran.config)
    at_1 = initial_policy(tiny())
    far = 0
    for t in ran.trajectories():
        want, at_one = logprobs_of(at_t, t), logprobs_of(at_1, t)
        for tok, w, one in zip(tokens(t), want, at_one, strict=True):
            if tok.trained:
                assert tok.ratio == 1.0
                assert tok.old_logprob == pytest.approx(w, abs=1e-4)
                far += abs(one - w) > 1e-2
    assert far and trained(t)
