"""The pages' read side and view models, with numbers worked out by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dashboard.pages import configdiff, gantt, trajview
from dashboard.pages.schema import flatten
from dashboard.reads import sparklines, trajectories


def test_sample_steps_is_evenly_spaced_and_keeps_the_last_step():
    assert sparklines.sample_steps(0) == []
    assert sparklines.sample_steps(5) == [1, 2, 3, 4, 5]
    steps = sparklines.sample_steps(100_000, 5)
    assert steps == [1, 25001, 50001, 75000, 100000]  # 1 + round(i * 99999 / 4)


def test_spark_svg_fits_the_viewbox():
    assert sparklines.spark_svg([]) == ""
    assert (
        sparklines.spark_svg([(1, 0.0), (3, 1.0), (5, 0.5)])
        == "M0.0,23.0 50.0,1.0 100.0,12.0"
    )
    assert sparklines.spark_svg([(1, 2.0), (2, 2.0)]) == "M0.0,23.0 100.0,23.0"  # flat


def test_nearest_prefers_the_closest_then_the_earlier_step():
    assert trajectories.nearest([], 3) is None
    assert trajectories.nearest([2, 4, 10], None) == 10
    assert trajectories.nearest([2, 4, 10], 3) == 2
    assert trajectories.nearest([2, 4, 10], 8) == 10


def _cp(stages, path, critical, total):
    return SimpleNamespace(
        stages=stages, path=path, critical_steps=critical, total_steps=total
    )


def test_the_gantt_runs_stages_in_sequence_and_marks_the_critical_path():
    # stage 0: orchestrator 1 step, sub-agents of 5 and 3 steps; stage 1: 2 steps alone.
    stages = [
        {
            "orchestrator_steps": 1,
            "subagents": [
                {"subtask": "a", "steps": 5, "success": True},
                {"subtask": "b", "steps": 3, "success": False},
            ],
        },
        (2, []),
    ]
    g = gantt.gantt(_cp(stages, [0, None], 8, 11))
    bars = [(b.lane, b.start, b.steps, b.critical, b.ok) for b in g.bars]
    assert bars == [
        (0, 0, 1, True, True),
        (1, 1, 5, True, True),
        (2, 1, 3, False, False),
        (0, 6, 2, True, True),
    ]
    assert g.span == 8 and g.lanes == 3 and g.stage_starts == [0, 6]
    assert g.parallel_saving == pytest.approx(1 - 8 / 11)
    first = g.rects()[0]
    assert first["x"] == 0 and first["w"] == pytest.approx(100 / 8 - 0.1)


def _traj(per_step, components, total, segments=None):
    return SimpleNamespace(
        segments=segments
        or [
            {"turn": 0, "kind": "prompt", "text": "q", "mask": "prompt", "n": 1},
            {"turn": 0, "kind": "action", "text": "search x", "mask": None, "n": 2},
            {"turn": 0, "kind": "tool", "text": "doc", "mask": "tool", "n": 1},
            {"turn": 1, "kind": "action", "text": "answer y", "mask": None, "n": 2},
        ],
        rewards={"total": total, "components": components, "per_step": per_step},
        reward=total,
        shared_prompt=False,
        facts={},
    )


def test_the_trajectory_view_attributes_rewards_per_step_and_checks_the_sums():
    t = _traj(
        {"outcome": [0.0, 1.0], "format": [0.05, 0.05]},
        {"outcome": 1.0, "format": 0.1},
        1.1,
    )
    judge = SimpleNamespace(target_step=1, judge="rules")
    episode = SimpleNamespace(target_step=None, judge="other")
    v = trajview.build(t, [judge, episode])
    assert [s.kind for s in v.prompt] == ["prompt"]
    assert [[s.kind for s in b.segments] for b in v.steps] == [
        ["action", "tool"],
        ["action"],
    ]
    assert v.steps[0].tool == "search" and v.steps[1].tool == "answer"
    assert v.steps[1].rewards == [("outcome", 1.0), ("format", 0.05)]
    assert v.steps[1].total == pytest.approx(1.05)
    assert v.all_ok and v.component_sum == pytest.approx(1.1)
    assert v.steps[1].judgements == [judge] and v.episode_judgements == [episode]


def test_a_sum_that_does_not_match_is_reported_per_component():
    t = _traj({"outcome": [0.0, 1.0]}, {"outcome": 0.5}, 0.5)
    v = trajview.build(t, [])
    assert [(c.name, c.ok) for c in v.checks] == [("outcome", False)]
    assert v.total_ok and not v.all_ok


def test_flatten_keeps_lists_of_scalars_whole():
    assert flatten({"a": {"b": [1, 2], "c": [{"d": 3}]}, "e": {}}) == {
        "a.b": [1, 2],
        "a.c.0.d": 3,
        "e": {},
    }


def test_config_diff_reports_only_what_differs():
    a = {"name": "x", "algorithm": {"preset": "grpo", "clip_high": None}, "steps": 10}
    b = {"name": "y", "algorithm": {"preset": "grpo", "clip_high": 0.28}, "steps": 10.0}
    c = {"name": "x", "algorithm": {"preset": "grpo"}, "steps": 10}
    rows = configdiff.diff([a, b, c])
    assert [(r.path, r.values) for r in rows] == [
        ("name", ("x", "y", "x")),
        ("algorithm.clip_high", ("default", "0.28", "—")),
    ]
    assert configdiff.diff([a, a]) == []


def _reward(*components, judges=None):
    reward = {"components": [{"name": n, "weight": w} for n, w in components]}
    if judges is not None:
        reward["judges"] = judges
    return {"reward": reward}


def test_config_diff_matches_reward_components_by_name_not_position():
    a = _reward(("outcome", 1.0), ("format", 0.1), judges=[])
    b = _reward(("fbeta", 1.0), ("trajectory_recall", 0.2), ("format", 0.1))
    rows = {r.path: r.values for r in configdiff.diff([a, b])}
    # format is the second component of one and the third of the other: same weight,
    # no row. A component only one run has is one row, not one per field.
    assert rows == {
        "reward.components.outcome": ("weight=1.0", "—"),
        "reward.components.fbeta": ("—", "weight=1.0"),
        "reward.components.trajectory_recall": ("—", "weight=0.2"),
    }
    c = _reward(("fbeta", 1.0), ("format", 0.05))
    rows = configdiff.diff([b, c])
    assert [(r.path, r.values) for r in rows] == [
        ("reward.components.trajectory_recall", ("weight=0.2", "—")),
        ("reward.components.format.weight", ("0.1", "0.05")),
    ]


def test_config_diff_sees_no_difference_between_no_judges_and_empty_judges():
    a = _reward(("outcome", 1.0), judges=[])
    b = _reward(("outcome", 1.0))
    c = _reward(("outcome", 1.0), judges=[])
    assert configdiff.diff([a, b, c]) == []


def test_config_diff_of_whole_parameters_lists_what_is_set_not_the_defaults():
    """A newcomer's compare of a dataset run and a calc run showed
    ``env.params`` as "path=..., id_key=default, ...": an unset key said nothing."""
    a = {"env": {"name": "dataset", "params": {"path": "d.jsonl", "id_key": None}}}
    b = {"env": {"name": "calc", "params": {"max_operand": 9}}}
    c = {"env": {"name": "calc", "params": {"ops": None}}}
    rows = {r.path: r.values for r in configdiff.diff([a, b, c])}
    assert rows["env.params"] == ("path=d.jsonl", "max_operand=9", "default")
