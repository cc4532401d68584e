"""A plugin in a temporary directory, named in settings.PLUGINS and loaded by the one
loader, adds an environment and a reward component that a run through the API uses
end to end; both appear in the API schema and the form."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dashboard.models import Run, Trajectory
from dashboard.runs.jobs import execute_run
from trainer.plugins import load_plugins

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = Path(__file__).parents[2] / "bench" / "plugins" / "example_plugin.py"


@pytest.fixture
def echo_plugin(tmp_path, monkeypatch, settings, plugin_sandbox):
    """The README's example plugin, as a module of its own in a temporary dir."""
    shutil.copy(EXAMPLE, tmp_path / "tmp_echo_plugin.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.PLUGINS = ["tmp_echo_plugin"]
    settings.RUNS_DIR = tmp_path / "runs"
    assert load_plugins(settings.PLUGINS) == ["tmp_echo_plugin"]  # as apps.ready does


def test_a_plugin_environment_and_component_run_through_the_api(
    echo_plugin, owner_client, tiny_config, enqueued
):
    config = {
        **tiny_config,
        "env": {"name": "echo", "params": {"words": 3}},
        "reward": {
            "components": [
                {"name": "echo_match", "weight": 1.0, "params": {"partial": 0.25}}
            ]
        },
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 1},
        "steps": 2,
    }
    r = owner_client.post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    assert r.status_code == 201, r.content
    run_id = r.json()["id"]
    assert execute_run.run(run_id) == "succeeded"  # the real trainer, in-process
    assert Run.objects.get(pk=run_id).status == "succeeded"
    trajs = list(Trajectory.objects.filter(run_id=run_id))
    assert trajs
    for t in trajs:
        paid = t.rewards["components"]["echo_match"]
        assert paid in (0.0, 0.25, 1.0)
        assert t.rewards["per_step"]["echo_match"][-1] == paid


def test_a_bad_param_of_a_plugin_component_is_a_400_naming_it(
    echo_plugin, owner_client, tiny_config, enqueued
):
    config = {
        **tiny_config,
        "env": {"name": "echo"},
        "reward": {"components": [{"name": "echo_match", "params": {"partial": 3}}]},
    }
    r = owner_client.post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    assert r.status_code == 400
    assert any(
        e.startswith("config.reward.components.0.echo_match.params.partial:")
        for e in r.json()["errors"]
    ), r.json()
    assert enqueued == []


def test_the_plugin_appears_in_the_api_schema_and_the_form(echo_plugin, owner_client):
    schema = owner_client.get("/api/config/schema").json()
    assert "EchoEnvConfig" in schema["$defs"]
    assert "EchoMatchComponent" in schema["$defs"]
    page = owner_client.get("/runs/new/").content.decode()
    assert 'value="echo"' in page and "say the colour the prompt names" in page
    assert "echo_match" in page
    echo = owner_client.get("/runs/new/?env=echo").content.decode()
    assert 'name="envp.echo.words"' in echo
    assert 'name="reward.components.0.params.partial"' in echo
