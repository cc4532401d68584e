"""What an empty chart of the run page says: why no point will come, when the run's
config tells (``dashboard.pages.charts.empty_text``), else "No data yet."."""

from __future__ import annotations

import pytest

from dashboard.pages.charts import run_charts


def _empty(config: dict) -> dict[str, str]:
    return {c["id"]: c["empty"] for c in run_charts(config)}


@pytest.mark.parametrize("env", ["calc", "search", "dataset"])
def test_an_environment_without_sub_agents_says_it_has_no_critical_steps(env):
    text = _empty({"env": {"name": env}})["critical"]
    assert text.startswith("No sub-agents in this run")
    assert f"{env} episodes have none" in text


def test_a_swarm_run_waits_for_its_critical_steps():
    assert _empty({"env": {"name": "swarm"}})["critical"] == "No data yet."


@pytest.mark.parametrize("config", [{}, {"env": {"name": "a_plugin_not_loaded"}}])
def test_an_environment_this_process_does_not_know_promises_nothing(config):
    assert _empty(config)["critical"] == "No data yet."


def test_the_kl_chart_of_a_run_without_a_kl_term_says_so():
    empty = _empty({"env": {"name": "swarm"}, "algorithm": {"kl_beta": 0.0}})
    assert empty["kl"].startswith("No KL penalty in this run")
    assert _empty({"algorithm": {"kl_beta": 0.05}})["kl"] == "No data yet."
