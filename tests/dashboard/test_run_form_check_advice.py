"""What the new-run form's live check (``/runs/new/check/``) and page give the form's
script beyond refusals: the tool-call advice on ``rollout.max_action_tokens`` (a
warning, the configuration still valid), each reward component's environments, and a
step's size in a unit that reads (MiB below a GiB).
"""

from __future__ import annotations

import json

import pytest
from chatmodels import build_chat_model
from dashtest import form_body

from dashboard.pages.forms import default_config, values_from_config
from rewards.components import COMPONENTS

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(tmp_path, settings):
    models, data = tmp_path / "models", tmp_path / "data"
    models.mkdir()
    data.mkdir()
    settings.MODEL_ROOTS, settings.DATA_ROOTS = [models], [data]
    rows = data / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "what is 1 + 13 ?", "answer": "14"}) + "\n")
    return models, rows


def test_the_check_warns_when_one_tool_call_cannot_fit_and_stays_valid(
    roots, owner_client
):
    models, rows = roots
    build_chat_model(models)
    values = values_from_config(default_config("dataset", "grpo", {"path": str(rows)}))
    values.update(
        {
            "model.path": "tiny-chat",
            "model.device": "cpu",
            "envp.dataset.tools": "calculator",
            "envp.dataset.holdout": "0",
        }
    )
    res = owner_client.post("/runs/new/check/", form_body(values)).json()
    assert res["ok"] is True, res["errors"]
    (message,) = res["warnings"]["rollout.max_action_tokens"]
    assert message.startswith("Max action tokens 12 cannot hold one tool call")
    assert "tokens with this model's tokenizer" in message
    values["rollout.max_action_tokens"] = "64"
    res = owner_client.post("/runs/new/check/", form_body(values)).json()
    assert res["ok"] is True and res["warnings"] == {}


def test_the_page_says_which_environments_each_component_is_for(owner_client):
    page = owner_client.get("/runs/new/").content.decode()
    start = page.index('<script id="component-envs" type="application/json">')
    data = json.loads(page[start:].split(">", 1)[1].split("</script>", 1)[0])
    assert data["fbeta"] == ["search"] and data["r_parallel"] == ["swarm"]
    assert data["outcome"] is None or "calc" in data["outcome"]
    assert set(data) == set(COMPONENTS.names()) & set(data)


def test_a_small_models_step_reads_in_mib(owner_client):
    values = values_from_config(default_config("calc", "grpo"))
    res = owner_client.post("/runs/new/check/", form_body(values)).json()
    assert res["ok"] is True, res["errors"]
    assert " MiB" in res["estimate"] and "about 0.0 GiB" not in res["estimate"]


def test_a_short_run_of_the_built_in_model_is_said_to_show_no_learning(owner_client):
    """A newcomer's 15-step run "learned nothing" under "✓ Valid configuration"."""
    values = values_from_config(default_config("calc", "grpo"))
    for steps, warned in ((15, True), (49, True), (50, False), (300, False)):
        values["steps"] = steps
        res = owner_client.post("/runs/new/check/", form_body(values)).json()
        assert res["ok"] is True, res["errors"]
        said = res["warnings"].get("steps", [])
        assert bool(said) is warned, (steps, said)
        if warned:
            assert said[0].startswith(f"{steps} steps is short for the built-in model")
