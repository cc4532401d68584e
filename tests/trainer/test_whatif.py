"""What-if reweighting (trainer.whatif, trainer.whatif_report): numbers worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau

from rewards.config import WeightSchedule
from trainer.algorithms import resolve_algorithm
from trainer.config import AlgorithmConfig
from trainer.whatif import (
    StoredRollout,
    Weighting,
    kendall_tau_b,
    reweigh,
    reweigh_matrix,
    step_factors,
    stored_matrix,
)
from trainer.whatif_report import compare


def algo(preset: str, **kw):
    return resolve_algorithm(AlgorithmConfig(preset=preset, **kw))


def ro(step, group, index, comps, per_step=None, tokens=(2, 2), **kw):
    per_step = per_step or {k: [0.0, v] for k, v in comps.items()}
    return StoredRollout(
        step=step,
        group=group,
        index=index,
        total=sum(comps.values()),
        components=comps,
        per_step=per_step,
        tokens_per_step=tokens,
        **kw,
    )


# Step 0. Group 0: r0 pays a=1 (weight 1), r1 pays b=2 (weight 2, raw 1).
# Group 1: both pay a=1 only: equal totals whatever b weighs.
OUTCOME_ROWS = [
    ro(0, 0, 0, {"a": 1.0, "b": 0.0}, tokens=(3, 2)),
    ro(0, 0, 1, {"a": 0.0, "b": 2.0}, tokens=(4,)),
    ro(0, 1, 0, {"a": 1.0, "b": 0.0}),
    ro(0, 1, 1, {"a": 1.0, "b": 0.0}),
]
OLD = Weighting({"a": 1.0, "b": 2.0})


def test_own_weights_change_nothing():
    report = compare(OUTCOME_ROWS, OLD, OLD, algo("grpo"), 2)
    t = report["total"]
    assert (t["sign_flips"], t["token_flips"], t["best_changes"]) == (0, 0, 0)
    assert (t["rank_changes"], t["signal_lost"], t["signal_gained"]) == (0, 0, 0)
    assert t["tau_mean"] == 1.0 and t["tau_groups"] == 1  # group 1 is constant
    assert all(not v for v in report["examples"].values())


def test_halving_a_weight_flips_both_rollouts_of_the_group():
    # b: 2 -> 0.5 makes r1's total 2 * 0.5 / 2 = 0.5 < r0's 1. Dr. GRPO (no std):
    # old mean 1.5 -> A = (-0.5, +0.5); new mean 0.75 -> A = (+0.25, -0.25).
    report = compare(
        OUTCOME_ROWS, OLD, OLD.with_weights({"b": 0.5}), algo("dr_grpo"), 2
    )
    t = report["total"]
    assert t["trajectories"] == 4 and t["sign_flips"] == 2
    assert t["tokens"] == (3 + 2) + 4 + (2 + 2) * 2 and t["token_flips"] == 9
    assert t["token_flip_share"] == pytest.approx(9 / 17)
    assert t["best_changes"] == 1 and t["rank_changes"] == 1
    assert t["tau_mean"] == -1.0
    flip = report["examples"]["sign_flip"][0]
    assert flip["old_advantage"] == pytest.approx(-0.5)
    assert flip["new_advantage"] == pytest.approx(0.25)
    best = report["examples"]["best_change"][0]
    assert (best["group"], best["index"], best["old_best"]) == (0, 0, 1)
    assert best["new_total"] == 1.0


def test_a_scheduled_weight_is_divided_out_at_the_rollouts_step():
    # b anneals 2 -> 0 over 10 steps: w(5) = 1, so stored 3.0 means raw 3. A new base
    # weight 4 anneals 4 -> 0: w(5) = 2, new value 6. At step 10 both are 0: nothing to
    # recover. c weighed 0: its raw value was never stored, so weight 1 cannot apply.
    sched = WeightSchedule(kind="linear", end=0, steps=10)
    old = Weighting({"b": 2.0, "c": 0.0}, {"b": sched})
    new = old.with_weights({"b": 4.0, "c": 1.0})
    missing, fixed = {}, set()
    at5 = reweigh(
        ro(5, 0, 0, {"b": 3.0, "x": 0.5}), step_factors(old, new, 5), missing, fixed
    )
    assert at5.total == 6.5 and at5.step_totals == [0.0, 6.5]
    assert fixed == {"x"}
    at10 = reweigh(
        ro(10, 0, 0, {"b": 0.0, "c": 0.0}), step_factors(old, new, 10), missing, fixed
    )
    assert at10.total == 0.0 and missing == {"c": {10}}


def test_process_credit_counts_tokens_of_the_steps_that_flip():
    # Step rewards r0 (1, 0), r1 (0, 0.5); b x4 -> r1 (0, 2). Dr. GRPO std none:
    # old mean 0.375: r0 A = (0.25, -0.375), r1 A = (-0.25, 0.125)
    # new mean 0.75:  r0 A = (-0.5, -0.75),  r1 A = (0.5, 1.25)
    # per trajectory (2 tokens a step): old -0.0625, -0.0625; new -0.625, 0.875.
    rows = [
        ro(0, 0, 0, {"a": 1.0, "b": 0.0}, {"a": [1.0, 0.0], "b": [0.0, 0.0]}),
        ro(0, 0, 1, {"a": 0.0, "b": 0.5}, {"a": [0.0, 0.0], "b": [0.0, 0.5]}),
    ]
    old = Weighting({"a": 1.0, "b": 1.0})
    a = algo("dr_grpo", credit="process")
    report = compare(rows, old, old.with_weights({"b": 4.0}), a, 2)
    t = report["total"]
    assert t["sign_flips"] == 1 and t["token_flips"] == 4 and t["tokens"] == 8
    assert t["token_flip_share"] == 0.5 and t["best_changes"] == 1
    flip = report["examples"]["sign_flip"][0]
    assert flip["index"] == 1
    assert flip["old_advantage"] == pytest.approx(-0.0625)
    assert flip["new_advantage"] == pytest.approx(0.875)


def test_a_dropped_group_is_untrained_and_reported_when_it_gains_signal():
    # DAPO dropped group 1 (equal totals 1, 1); with a = 3 its totals are 3 and 1.
    rows = [
        ro(0, 0, 0, {"a": 0.0, "b": 2.0}),
        ro(0, 0, 1, {"a": 0.0, "b": 0.0}),
        ro(0, 1, 0, {"a": 1.0, "b": 0.0}, dropped=True),
        ro(0, 1, 1, {"a": 0.0, "b": 1.0}, dropped=True),
    ]
    report = compare(rows, OLD, OLD.with_weights({"a": 3.0}), algo("dapo"), 2)
    t = report["total"]
    assert t["trajectories"] == 2 and t["sign_flips"] == 0
    assert t["signal_gained"] == 1 and t["signal_lost"] == 0
    ex = report["examples"]["signal_change"][0]
    assert ex["group"] == 1 and ex["dropped"] and not ex["now_zero_variance"]
    assert t["best_changes"] == 0  # group 1: index 0 was tied first and is now best


def test_gae_credit_says_advantages_are_unavailable():
    report = compare(OUTCOME_ROWS, OLD, OLD.with_weights({"b": 0.5}), algo("ppo"), 2)
    assert report["total"]["sign_flips"] is None
    assert "critic" in report["unavailable"][0]
    assert report["total"]["best_changes"] == 1


def test_incomplete_groups_are_skipped_and_counted():
    report = compare(OUTCOME_ROWS[:3], OLD, OLD, algo("grpo"), 2)
    assert report["skipped_groups"] == 1 and report["total"]["groups"] == 1


def test_kendall_tau_b_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (50, 5)).astype(float)
    y = rng.integers(0, 3, (50, 5)).astype(float)
    ours = kendall_tau_b(x, y)
    ref = np.array([kendalltau(a, b).statistic for a, b in zip(x, y, strict=True)])
    np.testing.assert_allclose(ours, ref, equal_nan=True)


def test_the_batched_reweighing_equals_the_per_rollout_one():
    """reweigh_matrix (what compare uses) against reweigh on random rows: components
    with and without per-step values, different step counts, an unattributed residual,
    a component the config does not name, a factor that cannot be applied."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(40):
        n = int(rng.integers(1, 4))
        comps, per = {}, {}
        for key in ("a", "b", "c", "x"):
            if rng.random() < 0.25:
                continue
            if rng.random() < 0.7:
                per[key] = [
                    float(v) for v in rng.normal(size=int(rng.integers(1, n + 1)))
                ]
                comps[key] = float(sum(per[key]))
            else:
                comps[key] = float(rng.normal())
        total = sum(comps.values()) + (0.25 if i % 7 == 0 else 0.0)
        rows.append(StoredRollout(5, i // 8, i % 8, total, comps, per))
    for factors in (
        {"a": 1.0, "b": 1.0, "c": 1.0},
        {"a": 0.0, "b": 2.5, "c": None},
    ):
        missing, fixed, missing_1, fixed_1 = {}, set(), {}, set()
        batched = reweigh_matrix(stored_matrix(rows), factors, missing, fixed)
        for r, b in zip(rows, batched, strict=True):
            one = reweigh(r, factors, missing_1, fixed_1)
            assert b.total == pytest.approx(one.total, abs=1e-12)
            assert b.step_totals == pytest.approx(one.step_totals, abs=1e-12)
        assert (missing, fixed) == (missing_1, fixed_1)
    same = reweigh_matrix(
        stored_matrix(rows), {"a": 1.0, "b": 1.0, "c": 1.0}, {}, set()
    )
    assert [b.total for b in same] == [r.total for r in rows]  # exactly, as stored
