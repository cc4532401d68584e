"""Critical steps and the PARL rewards (Kimi K2.5), worked by hand."""

from __future__ import annotations

import pytest

from rewards import critical_steps, stages_from_facts
from rewards.params import FinishParams, ParallelParams, PerfParams
from rewards.parl import (
    critical_path,
    parallelism,
    r_finish,
    r_parallel,
    r_perf,
    stage_metrics,
)
from rewards.synthetic import episode


def stage(orch: int, *steps: int) -> dict:
    subs = [
        {"subtask": f"s{i}", "steps": n, "success": True} for i, n in enumerate(steps)
    ]
    return {"orchestrator_steps": orch, "subagents": subs}


def test_it_sums_orchestrator_steps_and_the_slowest_subagent_per_stage():
    # The concepts' example: max(5, 3, 4) + max(2, 6) = 11, plus 1 + 1 orchestrator steps.
    assert critical_steps([(1, [5, 3, 4]), (1, [2, 6])]) == 13
    assert critical_steps([(0, [5, 3, 4]), (0, [2, 6])]) == 11


def test_it_accepts_the_swarm_environments_dict_stages():
    assert critical_steps([stage(1, 5, 3, 4), stage(1, 2, 6)]) == 13
    assert stages_from_facts({"stages": [stage(2, 4)]}) == [(2, [4])]
    assert stages_from_facts({}) == []


def test_it_counts_only_orchestrator_steps_when_there_are_no_subagents():
    assert critical_steps([(3, []), (2, [])]) == 5
    assert critical_steps([stage(4)]) == 4
    assert critical_steps([]) == 0


@pytest.mark.parametrize(
    "bad", [[(1, [-2])], [(-1, [])], [(1, [2.5])], [(True, [])], ["x"]]
)
def test_it_rejects_malformed_stages_with_the_entry_named(bad):
    with pytest.raises(ValueError, match=r"stages\[0\]"):
        critical_steps(bad)


def test_it_records_which_subagent_is_on_the_critical_path():
    cp = critical_path([stage(1, 5, 3, 4), stage(1, 2, 6), stage(2)])
    assert cp["path"] == [0, 1, None]
    assert cp["critical_steps"] == 15 and cp["total_steps"] == 24
    assert cp["stages"][0]["subagents"][0]["subtask"] == "s0"


def test_it_measures_parallelism_as_subagents_per_stage_that_fanned_out():
    assert parallelism([(1, [3, 3, 3]), (1, []), (1, [2])]) == 2.0
    assert parallelism([(1, [4]), (1, [4])]) == 1.0
    assert parallelism([(1, [])]) == 0.0


def test_it_discounts_r_perf_by_critical_steps_against_the_budget():
    ep = episode("swarm", [{}, {}], success=True, stages=[(1, [5, 3, 4]), (1, [2, 6])])
    # cs = 13, budget 26: 1 - 0.5 * 13/26 = 0.75
    assert r_perf(ep, PerfParams(budget=26, discount=0.5)) == (0.0, 0.75)
    # Over budget the discount saturates: 1 - 0.5 * 1
    assert r_perf(ep, PerfParams(budget=5, discount=0.5)) == (0.0, 0.5)


def test_it_does_not_discount_r_perf_with_a_zero_budget():
    ep = episode("swarm", [{}], success=True, stages=[(1, [50])])
    assert r_perf(ep, PerfParams(budget=0)) == (1.0,)


def test_it_pays_no_r_perf_on_failure():
    ep = episode("swarm", [{}], success=False, stages=[(1, [2])])
    assert r_perf(ep, PerfParams(budget=10)) == (0.0,)


def test_it_falls_back_to_the_critical_steps_fact_for_r_perf():
    ep = episode("swarm", [{}], success=True, critical_steps=10)
    assert r_perf(ep, PerfParams(budget=20, discount=1.0)) == (0.5,)


def test_it_normalises_r_parallel_and_credits_the_spawning_steps():
    steps = [{"spawned": ["a", "b"]}, {}, {"spawned": ["c"]}, {}]
    ep = episode("swarm", steps, num_subagents=3)
    assert r_parallel(ep, ParallelParams(max_subagents=4)) == (0.5, 0.0, 0.25, 0.0)
    assert r_parallel(ep, ParallelParams(max_subagents=2)) == (1.0, 0.0, 0.0, 0.0)


def test_it_puts_r_parallel_not_seen_on_any_step_on_the_last_step():
    ep = episode("swarm", [{}, {}], stages=[(1, [2, 2, 2])])
    assert r_parallel(ep, ParallelParams(max_subagents=4)) == (0.0, 0.75)


def test_it_gives_zero_r_parallel_and_r_finish_without_subagents():
    ep = episode(
        "swarm", [{}], stages=[(3, [])], subtasks_assigned=0, subtasks_completed=0
    )
    assert r_parallel(ep, ParallelParams()) == (0.0,)
    assert r_finish(ep, FinishParams()) == (0.0,)


def test_it_pays_r_finish_as_completed_over_assigned_on_the_completing_steps():
    # The swarm env lists completed subtasks cumulatively on every step.
    steps = [
        {"completed": []},
        {"completed": ["a"]},
        {"completed": ["a", "c"]},
        {"completed": ["a", "c"]},
    ]
    ep = episode("swarm", steps, subtasks_assigned=4, subtasks_completed=2)
    assert r_finish(ep, FinishParams()) == (0.0, 0.25, 0.25, 0.0)


def test_it_counts_a_respawned_subtask_as_another_subagent():
    steps = [{"spawned": ["a", "b"]}, {"spawned": ["a"]}, {"spawned": []}]
    ep = episode("swarm", steps, num_subagents=3)
    assert r_parallel(ep, ParallelParams(max_subagents=6)) == (2 / 6, 1 / 6, 0.0)


def test_it_caps_r_finish_at_one():
    ep = episode("swarm", [{}], subtasks_assigned=2, subtasks_completed=5)
    assert r_finish(ep, FinishParams()) == (1.0,)


def test_it_reports_stage_metrics_for_orchestration_episodes():
    ep = episode(
        "swarm",
        [{}],
        stages=[stage(1, 5, 3, 4), stage(1, 2, 6)],
        subtasks_assigned=5,
        subtasks_completed=4,
    )
    assert stage_metrics(ep) == {
        "critical_steps": 13.0,
        "total_steps": 22.0,
        "parallelism": 2.5,
        "subagents": 5.0,
        "finish_rate": 0.8,
        "subagent_yield": 0.8,  # 4 subtasks done by 5 sub-agents
        "serial": 0.0,  # a stage ran 3 sub-agents at once
    }
    assert stage_metrics(episode("calc", [{}])) == {}
