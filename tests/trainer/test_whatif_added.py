"""What-if with a component the run did not have (the repair loop's r_finish on a
run that paid only for spawning): the new totals are the stored ones plus the new
weight times the component's raw values; the old ones stay as stored."""

from __future__ import annotations

from trainer.algorithms import resolve_algorithm
from trainer.config import AlgorithmConfig
from trainer.whatif import StoredRollout, Weighting, reweigh_matrix, stored_matrix
from trainer.whatif_report import compare, weights_report

OLD = Weighting({"a": 1.0})


def ro(group, index, a, added=None):
    return StoredRollout(
        step=3,
        group=group,
        index=index,
        total=a,
        components={"a": a},
        per_step={"a": [0.0, a]},
        tokens_per_step=(2, 2),
        added=added or {},
    )


# Group 0: r0 earned a=1, r1 a=0.5 but finished its subtasks (c raw 1 on step 1).
# Group 1: both earned a=1 (no signal); r0 alone has c raw 1 on step 0.
ROWS = [
    ro(0, 0, 1.0, {"c": [0.0, 0.0]}),
    ro(0, 1, 0.5, {"c": [0.0, 1.0]}),
    ro(1, 0, 1.0, {"c": [1.0, 0.0]}),
    ro(1, 1, 1.0),
]


def test_an_added_component_adds_its_weight_times_its_raw_values():
    m = stored_matrix(ROWS)
    assert m.added_keys == ["c"]
    before = reweigh_matrix(m, {"a": 1.0}, {}, set())
    after = reweigh_matrix(m, {"a": 1.0}, {}, set(), {"c": 2.0})
    assert [r.total for r in before] == [1.0, 0.5, 1.0, 1.0]
    assert [r.total for r in after] == [1.0, 2.5, 3.0, 1.0]
    assert after[1].step_totals == [0.0, 2.5] and after[2].step_totals == [2.0, 1.0]


def test_adding_it_flips_the_best_rollout_and_gives_a_group_its_signal():
    new = OLD.with_weights({"c": 1.0})
    report = compare(
        ROWS, OLD, new, resolve_algorithm(AlgorithmConfig(preset="grpo")), 2
    )
    t = report["total"]
    # Group 0: 1.0 vs 0.5 -> 1.0 vs 1.5: both advantages change sign, best 0 -> 1.
    # Group 1: 1.0 vs 1.0 (zero variance, advantages 0) -> 2.0 vs 1.0: both move
    # off 0, and the group gains its signal.
    assert t["sign_flips"] == 4 and t["best_changes"] == 1
    assert t["signal_gained"] == 1
    assert report["not_reweightable"] == [] and report["fixed"] == []
    assert weights_report(OLD, {"c": 1.0})["added"] == ["c"]


def test_without_a_weight_the_added_values_change_nothing():
    report = compare(
        ROWS, OLD, OLD, resolve_algorithm(AlgorithmConfig(preset="grpo")), 2
    )
    assert report["total"]["sign_flips"] == 0 and report["total"]["best_changes"] == 0
