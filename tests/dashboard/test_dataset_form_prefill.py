"""“Use in a new run” on a dataset starts from a form that does not trip its own
advice: a newcomer's prefilled form (the built-in model, from scratch) had warm-start
steps 0 and at once warned that without them a run seldom earns a first reward; and
Max turns read 6 beside Dataset max turns 4 (the smaller ends an episode)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from dashtest import client_for
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from dashboard.models import Dataset
from dashboard.pages.catalog import DEMO_WARMSTART, demo_warmstart
from dashboard.pages.forms import RunForm, default_config

pytestmark = pytest.mark.django_db

ROWS = "".join(
    json.dumps({"question": f"{i} + 1 ?", "answer": str(i + 1)}) + "\n"
    for i in range(20)
)


@pytest.fixture
def dataset(tmp_path, settings, owner):
    (tmp_path / "data").mkdir()
    settings.DATA_ROOTS, settings.MODEL_ROOTS = [tmp_path / "data"], [tmp_path]
    r = client_for(owner).post(
        "/datasets/",
        {
            "file": SimpleUploadedFile("sums.jsonl", ROWS.encode()),
            "prompt_key": "question",
        },
    )
    assert r.status_code == 302, r.content
    return Dataset.objects.get(owner=owner)


def value(html: str, name: str) -> str:
    m = re.search(rf'name="{re.escape(name)}"[^>]*value="([^"]*)"', html)
    assert m, name
    return m.group(1)


def test_the_prefilled_dataset_form_warm_starts_as_the_demo_and_agrees_on_turns(
    owner, dataset
):
    demo = yaml.safe_load(
        (settings.BASE_DIR / "bench" / "configs" / "dataset_arith.yaml").read_text()
    )
    html = (
        client_for(owner)
        .get(f"/runs/new/?env=dataset&dataset={dataset.pk}")
        .content.decode()
    )
    assert value(html, "model.path") == ""  # the built-in model, from scratch
    steps = int(value(html, "model.warmstart_steps"))
    assert steps == demo["model"]["warmstart_steps"] == demo_warmstart("dataset") > 0
    assert "data-warmstart-hint hidden>" in html  # the form's own advice: not shown
    assert value(html, "rollout.max_turns") == value(html, "envp.dataset.max_turns")


def test_every_environments_starting_point_has_a_warm_start_and_one_turn_limit():
    for env in ("calc", "search", "swarm", "dataset"):
        cfg = default_config(
            env, "grpo", {"path": "x.jsonl"} if env == "dataset" else None
        )
        assert cfg["model"]["warmstart_steps"] > 0, env
        assert RunForm(initial=cfg).warmstart_hint == "", env
        turns = cfg["env"]["params"].get("max_turns")
        assert turns is None or turns == cfg["rollout"]["max_turns"], env
    assert demo_warmstart("no-such-env") == DEMO_WARMSTART


def test_both_turn_limits_say_the_smaller_ends_an_episode(owner, dataset):
    html = (
        client_for(owner)
        .get(f"/runs/new/?env=dataset&dataset={dataset.pk}")
        .content.decode()
    )
    for name in ("rollout.max_turns", "envp.dataset.max_turns"):
        start = html.index(f'data-field="{name}"')
        field = html[start : html.index("</div>", start)]
        assert "smaller" in field and "ends an episode" in field, field
