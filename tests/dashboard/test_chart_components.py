"""The Reward components chart lists what the trainer pays: a config of ours as
``trainer.runner.reward_config_for`` resolves it (DAPO's overlong penalty, added at
run time, was missing from the chart while trajectories and the what-if showed it)."""

from __future__ import annotations

from dashboard.pages.charts import component_names, run_charts


def _components_chart(config: dict) -> list[str]:
    charts = {c["id"]: c for c in run_charts(config)}
    return charts["components"]["keys"]


def test_dapos_overlong_penalty_is_one_of_the_components_charted():
    dapo = {"env": {"name": "calc"}, "algorithm": {"preset": "dapo"}}
    assert "rewards/overlong_penalty/mean" in _components_chart(dapo)
    assert component_names(dapo)[-1] == "overlong_penalty"
    grpo = {"env": {"name": "calc"}, "algorithm": {"preset": "grpo"}}
    assert "rewards/overlong_penalty/mean" not in _components_chart(grpo)


def test_a_penalty_the_config_already_has_is_listed_once_with_its_label():
    own = {
        "env": {"name": "calc"},
        "algorithm": {"preset": "dapo"},
        "reward": {
            "components": [
                {"name": "outcome", "weight": 1.0},
                {"name": "overlong_penalty", "weight": 0.5, "label": "too long"},
            ]
        },
    }
    assert component_names(own) == ["outcome", "too long"]


def test_another_trainers_config_keeps_its_own_listing():
    trl = {"num_generations": 8, "report_to": ["trackio"], "learning_rate": 1e-6}
    assert component_names(trl) == component_names({})  # the calc default, as before
