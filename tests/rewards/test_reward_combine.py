"""The combined reward function: weights, schedules, per-step attribution, metrics."""

from __future__ import annotations

import math

import pytest

from rewards import (
    RewardConfig,
    build_reward_fn,
    check_reward_config,
    default_reward_config,
)
from rewards.synthetic import episode


def calc_ep(success: bool = True, ok: tuple[bool, ...] = (True, True)):
    steps = [{"tool": "calc", "ok": o} for o in ok[:-1]] + [
        {"tool": "answer", "ok": ok[-1]}
    ]
    return episode(
        "calc", steps, success=success, used_calculator=True, truncated=False
    )


def search_ep():
    steps = [
        {"tool": "search", "surfaced": ["a", "x"], "surfaced_gold": ["a"]},
        {"tool": "prune", "pruned": ["x"]},
        {"tool": "prune", "pruned": ["y"]},
        {"tool": "answer"},
    ]
    return episode(
        "search", steps, gold=["a", "b"], retained=["a"], surfaced_all=["a", "x"],
        num_searches=1, success=False, truncated=False,
    )  # fmt: skip


def swarm_ep():
    stages = [
        {"orchestrator_steps": 1, "subagents": [{"subtask": "p", "steps": 4, "success": True},
                                                {"subtask": "q", "steps": 6, "success": False}]},
        {"orchestrator_steps": 1, "subagents": []},
    ]  # fmt: skip
    steps = [
        {"tool": "spawn", "spawned": ["p", "q"], "stage": stages[0]},
        {"tool": "solve", "completed": ["p"]},
        {"tool": "finish", "stage": stages[1]},
    ]
    return episode(
        "swarm", steps, stages=stages, subtasks_assigned=2, subtasks_completed=1,
        num_subagents=2, success=True, truncated=False,
    )  # fmt: skip


def assert_sums(result):
    b = result.breakdown
    for name, parts in b.per_step.items():
        assert math.fsum(parts) == pytest.approx(b.components[name], abs=1e-12)
    assert math.fsum(b.components.values()) == pytest.approx(b.total, abs=1e-12)


@pytest.mark.parametrize(
    ("env", "ep"), [("calc", calc_ep()), ("search", search_ep()), ("swarm", swarm_ep())]
)
def test_it_attributes_every_default_component_per_step_summing_to_the_totals(env, ep):
    (result,) = build_reward_fn(default_reward_config(env), env_name=env)([ep], 1)
    assert set(result.breakdown.per_step) == {
        c.key for c in default_reward_config(env).components
    }
    for parts in result.breakdown.per_step.values():
        assert len(parts) == ep.num_steps
    assert_sums(result)


def test_it_weights_calc_outcome_format_and_the_rule_based_judge():
    (r,) = build_reward_fn(default_reward_config("calc"), env_name="calc")(
        [calc_ep(ok=(False, True))], 1
    )
    b = r.breakdown
    assert b.per_step["outcome"] == (0.0, 1.0)
    assert b.per_step["format"] == pytest.approx((0.0, 0.05))
    # rules judge: answer_given 1, used_tool 1, tool_validity 0.5 -> 2.5/3, weight 0.1
    assert b.components["judge"] == pytest.approx(0.1 * 2.5 / 3)
    assert b.total == pytest.approx(1.0 + 0.05 + 0.1 * 2.5 / 3)
    assert r.judgements[0].rationale.startswith("rule-based:")
    assert r.critical_path is None


def test_it_works_out_the_search_default_by_hand():
    (r,) = build_reward_fn(default_reward_config("search"), env_name="search")(
        [search_ep()], 1
    )
    c = r.breakdown.components
    assert c["fbeta"] == pytest.approx(17 / 33)  # retained a of {a, b}
    assert r.breakdown.per_step["trajectory_recall"] == pytest.approx((0.1, 0, 0, 0))
    assert r.breakdown.per_step["prune_penalty"] == pytest.approx((0, 0, -0.05, 0))
    assert r.breakdown.per_step["single_search_exit_penalty"] == (0, 0, 0, -0.2)
    assert (
        r.metrics["single_search_exit"] == 1.0 and r.metrics["single_doc_prunes"] == 2.0
    )


def test_it_anneals_the_parl_lambdas_and_reports_them():
    fn = build_reward_fn(default_reward_config("swarm"), env_name="swarm")
    (early,) = fn([swarm_ep()], 0)
    (mid,) = fn([swarm_ep()], 50)
    (late,) = fn([swarm_ep()], 500)
    assert (early.metrics["lambda_parallel"], mid.metrics["lambda_parallel"]) == (
        0.3,
        0.15,
    )
    assert (
        late.metrics["lambda_parallel"] == 0.0 and late.metrics["lambda_finish"] == 0.0
    )
    # r_parallel = 2/4 on the spawn step, times lambda 0.15
    assert mid.breakdown.per_step["r_parallel"] == pytest.approx((0.075, 0, 0))
    # r_finish = 1/2 on the step that completed p, times 0.15
    assert mid.breakdown.per_step["r_finish"] == pytest.approx((0, 0.075, 0))
    # r_perf: cs = (1 + 6) + 1 = 8, budget 20: 1 - 0.5 * 8/20
    assert mid.breakdown.components["r_perf"] == pytest.approx(0.8)
    assert late.breakdown.components["r_parallel"] == 0.0


def test_it_reports_lambda_parallel_zero_when_the_demo_leaves_it_out():
    from rewards.presets import demo_config

    fn = build_reward_fn(demo_config("swarm_serial_collapse"), env_name="swarm")
    (r,) = fn([swarm_ep()], 1)
    assert r.metrics["lambda_parallel"] == 0.0 and r.metrics["lambda_finish"] == 0.3


def test_it_sets_the_critical_path_and_stage_metrics_for_swarm_episodes():
    (r,) = build_reward_fn(default_reward_config("swarm"), env_name="swarm")(
        [swarm_ep()], 1
    )
    assert r.critical_path["critical_steps"] == 8
    assert r.critical_path["total_steps"] == 12
    assert r.critical_path["path"] == [1, None]
    assert r.metrics["critical_steps"] == 8.0 and r.metrics["parallelism"] == 2.0
    assert r.metrics["finish_rate"] == 0.5


def test_it_gives_an_episode_without_steps_one_pseudo_step():
    cfg = default_reward_config("calc")
    (r,) = build_reward_fn(cfg, env_name="calc")(
        [episode("calc", [], success=False)], 1
    )
    assert all(len(v) == 1 for v in r.breakdown.per_step.values())
    assert_sums(r)


def test_it_batches_several_episodes_in_order():
    fn = build_reward_fn(default_reward_config("calc"), env_name="calc")
    results = fn([calc_ep(True), calc_ep(False)], 3)
    assert [r.breakdown.components["outcome"] for r in results] == [1.0, 0.0]
    assert fn([], 3) == []


def test_it_refuses_components_that_read_facts_the_environment_lacks():
    cfg = default_reward_config("search")
    assert check_reward_config(cfg, "search") == []
    with pytest.raises(ValueError, match=r"components\.0\.fbeta: reads search facts"):
        build_reward_fn(cfg, env_name="calc")


def test_it_reports_an_all_failed_judge_as_zero_and_says_so():
    cfg = RewardConfig.model_validate(
        {
            "components": [{"name": "outcome"}, {"name": "judge", "weight": 0.5}],
            "judges": [{"name": "gen", "backend": "openai", "endpoint": "absent", "rubric": [{"name": "q"}]}],
        }
    )  # fmt: skip
    (r,) = build_reward_fn(cfg, env_name="calc")([calc_ep()], 1)
    assert r.breakdown.components["judge"] == 0.0
    assert r.metrics["judge/failures"] == 1.0 and r.metrics["judge/all_failed"] == 1.0
    assert "judge/score" not in r.metrics
    (jd,) = r.judgements
    assert not jd.ok and "'absent' is not on the allow-list" in jd.error


def test_it_uses_the_other_judges_when_one_returns_nan(monkeypatch):
    import rewards.judges.hf as hf

    monkeypatch.setattr(
        hf, "generate", lambda model, tok, prompt, n: "q: nan\nrationale: ?"
    )
    cfg = RewardConfig.model_validate(
        {
            "components": [{"name": "judge"}],
            "judges": [
                {"name": "rules", "rubric": [{"name": "success"}]},
                {
                    "name": "gen",
                    "backend": "hf",
                    "model_path": "/m",
                    "rubric": [{"name": "q"}],
                },
            ],
        }
    )
    fn = build_reward_fn(
        cfg, env_name="calc", judge_model_loader=lambda path: (None, None)
    )
    (r,) = fn([calc_ep(success=True)], 1)
    assert r.breakdown.components["judge"] == 1.0
    assert r.metrics["judge/failures"] == 1.0 and r.metrics["judge/disagreement"] == 0.0
    bad = r.judgements[1]
    assert (
        not bad.ok and bad.raw == "q: nan\nrationale: ?" and "non-finite" in bad.error
    )


def test_it_reports_judge_disagreement_as_the_spread_of_scores():
    cfg = RewardConfig.model_validate(
        {
            "components": [{"name": "judge"}],
            "judges": [
                {"name": "a", "rubric": [{"name": "success"}]},
                {"name": "b", "rubric": [{"name": "no_truncation"}]},
            ],
            "judge_aggregate": "min",
        }
    )
    ep = episode("calc", [{"tool": "answer"}], success=False, truncated=False)
    (r,) = build_reward_fn(cfg, env_name="calc")([ep], 1)
    assert r.metrics["judge/disagreement"] == 1.0
    assert r.metrics["judge/a/score"] == 0.0 and r.metrics["judge/b/score"] == 1.0
    assert r.breakdown.total == 0.0


def test_it_survives_a_judge_that_crashes(monkeypatch):
    from rewards.judges import rubric

    def boom(self, episodes):
        raise RuntimeError("bug")

    monkeypatch.setattr(rubric.RubricJudge, "__call__", boom)
    cfg = default_reward_config("calc")
    (r,) = build_reward_fn(cfg, env_name="calc")([calc_ep()], 1)
    assert r.judgements[0].error == "judge crashed: RuntimeError: bug"
    assert r.breakdown.components["judge"] == 0.0


def test_it_labels_components_in_results():
    cfg = RewardConfig.model_validate(
        {"components": [{"name": "outcome", "label": "win", "weight": 2.0}]}
    )
    (r,) = build_reward_fn(cfg, env_name="calc")([calc_ep()], 1)
    assert r.breakdown.components == {"win": 2.0} and r.metrics["weight/win"] == 2.0
