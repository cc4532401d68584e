"""Plugins: one loader for web, worker and CLI; what a plugin registers reaches the
schema; a plugin that fails is an error naming it."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from trainer.cli import main
from trainer.config import TrainConfig
from trainer.plugins import ENTRY_POINT_GROUP, PluginError, load_plugins

EXAMPLE = Path(__file__).parents[2] / "bench" / "plugins" / "example_plugin.py"
ECHO = {"name": "echo", "params": {"words": 3}}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch, plugin_sandbox):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_example_plugin_adds_an_environment_and_a_component_to_the_schema(
    plugin_sandbox,
):
    with pytest.raises(ValueError, match="echo"):
        TrainConfig.model_validate({"env": ECHO})
    assert load_plugins(["bench.plugins.example_plugin"]) == [
        "bench.plugins.example_plugin"
    ]
    cfg = TrainConfig.model_validate(
        {"env": ECHO, "reward": {"components": [{"name": "echo_match"}]}}
    )
    assert cfg.env.params.words == 3
    assert cfg.reward.components[0].params.partial == 0.5
    schema = TrainConfig.model_json_schema()
    assert "EchoEnvConfig" in schema["$defs"]
    assert "EchoMatchComponent" in schema["$defs"]
    # Typed params: an error names the field under the plugin's own names.
    with pytest.raises(ValueError, match=r"components\.0\.echo_match\.params\.partial"):
        TrainConfig.model_validate(
            {
                "env": ECHO,
                "reward": {
                    "components": [{"name": "echo_match", "params": {"partial": 2}}]
                },
            }
        )
    # Loaded once: a second call imports nothing.
    assert load_plugins(["bench.plugins.example_plugin"]) == []


def test_a_plugin_component_is_refused_on_an_environment_it_does_not_serve(
    plugin_sandbox,
):
    load_plugins(["bench.plugins.example_plugin"])
    with pytest.raises(ValueError, match="echo_match"):
        TrainConfig.model_validate(
            {
                "env": {"name": "calc"},
                "reward": {"components": [{"name": "echo_match"}]},
            }
        )


def test_a_plugin_that_fails_to_import_is_an_error_naming_it(plugin_dir):
    (plugin_dir / "broken_plugin.py").write_text("raise RuntimeError('no gpu here')\n")
    with pytest.raises(
        PluginError,
        match=r"plugin 'broken_plugin' failed to import: "
        r"RuntimeError: no gpu here",
    ):
        load_plugins(["broken_plugin"])
    with pytest.raises(PluginError, match="plugin 'no_such_plugin_xyz'"):
        load_plugins(["no_such_plugin_xyz"])


def test_entry_points_of_the_group_are_loaded(plugin_dir):
    shutil.copy(EXAMPLE, plugin_dir / "ep_echo_plugin.py")
    dist = plugin_dir / "ep_echo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ep-echo\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\necho = ep_echo_plugin\n"
    )
    assert "ep_echo_plugin" in load_plugins([])
    assert TrainConfig.model_validate({"env": ECHO}).env.name == "echo"


def test_the_cli_runs_a_plugin_environment_with_plugin(
    tmp_path, plugin_sandbox, capsys
):
    config = {
        "steps": 2,
        "env": ECHO,
        "model": {"size": "tiny", "device": "cpu"},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 1},
    }
    path = tmp_path / "echo.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "echo" in capsys.readouterr().err  # unknown without the plugin
    argv = [
        "run",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--plugin",
        "bench.plugins.example_plugin",
    ]
    assert main(argv) == 0
    events = (tmp_path / "out" / "events.jsonl").read_text()
    assert '"echo_match"' in events  # the environment's own default reward


def test_a_bad_plugin_on_the_cli_exits_2_naming_it(tmp_path, plugin_sandbox, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 1\n")
    assert main(["run", str(path), "--plugin", "no_such_plugin_xyz"]) == 2
    assert "plugin 'no_such_plugin_xyz' failed to import" in capsys.readouterr().err


def test_the_example_plugins_component_docstring_runs(plugin_sandbox):
    import doctest

    load_plugins(["bench.plugins.example_plugin"])
    module = sys.modules["bench.plugins.example_plugin"]
    assert doctest.testmod(module).failed == 0


def test_the_readme_shows_the_example_plugin_file():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "## Writing a plugin" in readme
    body = textwrap.dedent(EXAMPLE.read_text())
    assert body.split('"""', 2)[2].strip()[:200] in readme
