"""Options reach the math, for wiring breaks a mutation review found the suite let
through: the lower clip bound, the adaptive KL coefficient in the loss, the KL term's
aggregation, process credit's std scaling, the checkpoint cadence and retention, and
the seed of the task stream. Each test names the break (mutant) it guards; each runs
through ``trainer.loop.train`` and checks what it recorded, trained or wrote."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from option_registry import covers
from wiring import (
    by_group,
    initial_policy,
    logprobs_of,
    run,
    seq_mean,
    tiny,
    token_mean,
    tokens,
    trained,
)


# ----- the lower clip bound ------------------------------------------------------
@covers("algorithm.clip_low", "algorithm.clip_high")
def test_the_lower_clip_bound_is_clip_low_not_clip_high(tmp_path):
    """Guards ``clip_low=algo.clip_low`` in the update's ``policy_loss`` call (mutant
    M2: ``clip_low=algo.clip_high``, the lower bound taken from the upper one).

    Two epochs at a small learning rate: the second sees ratios a few percent from
    1. Some token with A < 0 has 1 - hi <= r < 1 - lo: clipped below at lo, not at
    hi, so the clip-low share counts it and its gradient is cut."""
    lo, hi = 0.005, 0.02

    def clipped(low):
        cfg = tiny(
            algorithm={"clip_low": low, "clip_high": hi},
            optim={"epochs": 2, "lr": 1e-5},
        )
        return run(cfg, tmp_path)

    ran = clipped(lo)
    toks = [tok for t in ran.trajectories() for tok in trained(t)]
    band = [tok for tok in toks if tok.advantage < 0 and 1 - hi <= tok.ratio < 1 - lo]
    assert band, "no token tells the two bounds apart"
    # Metrics: the mean of the two epochs; the first sees ratio 1, nothing clipped.
    low = [tok.advantage < 0 and tok.ratio < 1 - lo for tok in toks]
    want = sum(low) / len(low) / 2
    assert ran.metrics()["clip_ratio/low_mean"] == pytest.approx(want, abs=1e-6)
    # The band's tokens train at (lo, hi) and not at (hi, hi): other weights.
    other = clipped(hi).weights()
    mine = ran.weights()
    assert mine.keys() == other.keys()
    assert any(not torch.equal(mine[k], other[k]) for k in mine)


# ----- the adaptive KL coefficient in the loss -----------------------------------
@covers("algorithm.kl_target", "algorithm.kl_horizon", "algorithm.kl_beta")
def test_the_loss_weighs_the_kl_by_the_adaptive_coefficient_of_its_step(tmp_path):
    """Guards ``loss + scores.kl_beta * kl`` in the update (mutant M4: ``loss +
    learner.algo.kl_beta * kl``, the adaptive coefficient reported but the fixed
    kl_beta trained with).

    kl_horizon 6 = the step's samples (2 tasks x 3): the coefficient moves by the
    whole e = clip(kl / target - 1, -.2, .2) each step. A target far above the
    KL keeps e = -.2: 1.0, 0.8, 0.64. No entropy bonus: the loss is the policy
    loss plus coef x KL."""
    cfg = tiny(
        steps=3,
        algorithm={
            "kl_beta": 1.0,
            "kl_target": 10.0,
            "kl_horizon": 6,
            "entropy_coef": 0.0,
        },
        optim={"lr": 0.05},
    )
    ran = run(cfg, tmp_path)
    for step, coef in ((2, 0.8), (3, 0.64)):
        m = ran.metrics(step)
        assert m["kl/coef"] == pytest.approx(coef, rel=1e-9)
        assert abs(m["kl/coef"] - cfg.algorithm.kl_beta) > 0.1
        assert m["kl"] > 1e-2  # the policy drifted: the KL weighs in the loss
        want = m["policy_loss"] + m["kl/coef"] * m["kl"]
        assert m["loss"] == pytest.approx(want, abs=1e-6), step


# ----- the KL term's aggregation -------------------------------------------------
def _k3_rows(ran, step: int) -> list[list[float]]:
    """Per trained token, k3 of the learner's recorded log-prob against the
    reference's (the policy RL started from), one row per rollout."""
    ref = initial_policy(ran.config)
    rows = []
    for t in ran.trajectories(step):
        row = []
        for tok, r in zip(tokens(t), logprobs_of(ref, t), strict=True):
            if tok.trained:
                d = tok.logprob - r
                row.append(min(math.exp(-d) + d - 1, 10.0))  # k3, default clamp 10
        rows.append(row)
    return rows


@covers("algorithm.agg", "algorithm.kl_beta")
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_sum_norm"])
def test_the_kl_in_the_loss_is_aggregated_as_agg_says(agg, tmp_path):
    """Guards ``algo.agg`` in the KL term's ``agg_loss`` call (mutant M5: the KL
    always aggregated ``"seq_mean_token_mean"``, whatever ``algorithm.agg``).

    Rollouts of different lengths: a token mean, a mean of sequence means and a
    token sum over B x max_total_tokens (Dr. GRPO's constant) all differ."""
    max_total = 300
    cfg = tiny(
        steps=2,
        algorithm={"agg": agg, "kl_beta": 1e-3},
        rollout={"max_total_tokens": max_total},
        optim={"lr": 0.05},
    )
    ran = run(cfg, tmp_path)
    rows = _k3_rows(ran, 2)  # step 2: the policy has drifted from the reference
    assert len({len(r) for r in rows}) > 1  # rollouts of different lengths
    want = {
        "token_mean": token_mean,
        "seq_mean_token_sum_norm": lambda r: (
            math.fsum(map(math.fsum, r)) / (len(r) * max_total)
        ),
    }[agg](rows)
    kl = ran.metrics(2)["kl"]
    assert abs(want - seq_mean(rows)) > 1e-4  # the aggregations tell apart
    assert kl == pytest.approx(want, abs=2e-5)


# ----- process credit's std scaling ----------------------------------------------
@covers("algorithm.credit", "algorithm.std_scaling", "algorithm.eps")
@pytest.mark.parametrize("scaling", ["group", "batch", "none"])
def test_process_credit_scales_step_rewards_as_std_scaling_says(scaling, tmp_path):
    """Guards ``algo.std_scaling`` in process credit's advantages (mutant M6: the
    process branch always scaled by the ``"group"`` std).

    A token's advantage is the sum over its step and the later ones of (r - group
    mean) / divisor over every step reward of the group: the group's std + eps,
    the batch's std + eps, or 1. eps 0.5 (not the default) so a wrong eps shows."""
    eps = 0.5
    cfg = tiny(
        algorithm={"credit": "process", "std_scaling": scaling, "eps": eps},
    )
    groups = by_group(run(cfg, tmp_path).trajectories())
    steps_of = {
        g: [t["rewards"]["per_step"]["shape"] for t in trajs]
        for g, trajs in groups.items()
    }
    everyone = [r for steps in steps_of.values() for s in steps for r in s]
    told_apart = False
    for g, trajs in groups.items():
        flat = [r for s in steps_of[g] for r in s]
        mean = math.fsum(flat) / len(flat)
        group_div = statistics.stdev(flat) + eps
        div = {
            "group": group_div,
            "batch": statistics.stdev(everyone) + eps,
            "none": 1.0,
        }[scaling]
        told_apart |= abs(div - group_div) > 1e-2
        for t, s in zip(trajs, steps_of[g], strict=True):
            norm = [(r - mean) / div for r in s]
            for tok in trained(t):
                want = math.fsum(norm[tok.turn :])
                assert tok.advantage == pytest.approx(want, abs=1e-5)
    # Some group's divisor is not its own std's (none to tell at "group").
    assert told_apart == (scaling != "group")


# ----- checkpoints ---------------------------------------------------------------
@covers("checkpoint.every", "checkpoint.keep")
@pytest.mark.parametrize(
    ("every", "keep", "written", "kept"),
    [
        (1, 3, [1, 2, 3, 4], [2, 3, 4]),
        (1, 1, [1, 2, 3, 4], [4]),
        (2, 3, [2, 4], [2, 4]),
        (0, 3, [4], [4]),
    ],
)
def test_checkpoints_are_written_every_n_steps_and_the_newest_keep_kept(
    every, keep, written, kept, tmp_path
):
    """Guards ``keep=config.checkpoint.keep`` in ``save_state`` (mutant M15:
    ``keep=2``, the option ignored) and ``checkpoint.every``'s cadence: 4 steps,
    a checkpoint every ``every`` steps and always after the last (every 0: only
    then); the newest ``keep`` stay on disk."""
    cfg = tiny(steps=4, checkpoint={"every": every, "keep": keep})
    ran = run(cfg, tmp_path)
    events = [e["step"] for e in ran.sink.of_type("checkpoint")]
    assert events == written
    on_disk = sorted(p.name for p in ran.checkpoint.parent.glob("step-*"))
    assert on_disk == [f"step-{s:06d}" for s in kept]


# ----- the seed of the task stream -----------------------------------------------
@covers("seed")
def test_the_seed_draws_the_tasks_of_a_run(tmp_path):
    """Guards ``task_rng=random.Random(config.seed)`` in ``train`` (mutant M18:
    ``random.Random(0)``, every seed drawing the same tasks).

    The calc environment draws its tasks only from the trainer's task stream: the
    same seed draws the same tasks, another seed others."""

    def task_ids(seed):
        ran = run(tiny(seed=seed), tmp_path)
        return [
            t["task_id"]
            for t in sorted(ran.trajectories(1), key=lambda t: (t["group"], t["index"]))
        ]

    first = task_ids(0)
    assert len(set(first)) == 2  # 2 tasks x 3 rollouts
    assert task_ids(0) == first
    assert task_ids(1) != first
