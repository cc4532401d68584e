"""No server path on a page or in an API answer (the README's promise): a newcomer
compared a run on an uploaded dataset with another and read ``path=/tmp/walk1/var/
data/uploads/1/problemes_-ete.jsonl`` in "Config differences"; the same absolute
path was in ``GET /api/runs/<id>`` and in the run's export. Every place a run's config
reaches shows a path as the form's pickers name it, relative to its root
(``roots.shown_paths``); the stored config keeps the real path, and a config sent
back with the relative path (the API, a clone, the what-if's clone) resolves again."""

from __future__ import annotations

import json

import pytest
from dashtest import client_for
from test_run_api import body_of

from dashboard.models import Run
from dashboard.pages.forms import normalise
from dashboard.runs import envcheck
from tests.fixtures.seed import seed_run
from trainer.config import TrainConfig

pytestmark = pytest.mark.django_db

ROWS = "".join(
    json.dumps({"prompt": f"{i} + 1 ?", "answer": str(i + 1)}) + "\n" for i in range(12)
)


@pytest.fixture
def roots_(tmp_path, settings, owner):
    data, models = tmp_path / "var" / "data", tmp_path / "var" / "models"
    upload = data / "uploads" / str(owner.pk) / "problemes-ete.jsonl"
    upload.parent.mkdir(parents=True)
    upload.write_text(ROWS)
    for name in ("mychat", "judge"):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text("{}")
    settings.DATA_ROOTS, settings.MODEL_ROOTS = [data], [models]
    settings.RUNS_DIR = tmp_path / "runs"
    envcheck._build.cache_clear()
    return data, models, upload


def config(data, models, upload, name: str) -> dict:
    rubric = [{"name": "quality", "description": "is it right"}]
    return normalise(
        TrainConfig.model_validate(
            {
                "name": name,
                "steps": 4,
                "env": {
                    "name": "dataset",
                    "params": {"path": str(upload), "holdout": 0.2},
                },
                "model": {"path": str(models / "mychat")},
                "reward": {
                    "components": [{"name": "exact_match"}, {"name": "format"}],
                    "judges": [
                        {
                            "name": "grader",
                            "backend": "hf",
                            "rubric": rubric,
                            "model_path": str(models / "judge"),
                        }
                    ],
                },
            }
        ).model_dump(mode="json")
    )


def test_no_page_or_answer_shows_the_data_or_model_root(roots_, owner, enqueued):
    data, models, upload = roots_
    run = seed_run(
        owner, name="mine", config=config(data, models, upload, "mine"), alert_every=2
    )
    Run.objects.filter(pk=run.pk).update(
        error=f"DatasetError: path: {str(upload)!r} holds no rows"
    )
    other = seed_run(owner, name="calc", env="calc", preset="grpo", steps=4)
    stored = Run.objects.get(pk=run.pk).config
    assert stored["env"]["params"]["path"] == str(upload)  # the real path is kept
    client = client_for(owner)
    ids = f"{run.pk},{other.pk}"
    get = [
        "/",
        "/runs/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/clone/",
        f"/runs/{run.pk}/clone/?start=checkpoint",
        f"/runs/{run.pk}/clone/?weights=" + json.dumps({"format": 0}),
        f"/runs/{run.pk}/trajectories/?step=2",
        f"/runs/{run.pk}/trajectories/2/0/0/",
        f"/runs/{run.pk}/tasks/task-2-0/",
        f"/compare/?runs={ids}",
        f"/compare/task/?runs={ids}&task=task-2-0",
        "/api/runs",
        f"/api/runs/{run.pk}",
        f"/api/runs/{run.pk}/alerts",
        f"/api/runs/{run.pk}/trajectories?step=2",
        f"/api/runs/{run.pk}/trajectories/2/0/0",
        f"/api/runs/{run.pk}/repair",
    ]
    seen = {}
    for url in get:
        r = client.get(url)
        # a repair comparison: this run is none (a 404 that says so)
        assert r.status_code == (404 if url.endswith("/repair") else 200), url
        seen[url] = r.content.decode()
    seen["export"] = body_of(client.get(f"/api/runs/{run.pk}/export")).decode()
    r = client.post(
        f"/api/runs/{run.pk}/whatif",
        json.dumps({"weights": {"format": 0}}),
        content_type="application/json",
    )
    assert r.status_code == 200, r.content
    seen["whatif"] = r.content.decode()
    for where, text in seen.items():
        for root in (data, models):
            assert str(root) not in text, (where, root)
    # ... and what they show is the path relative to its root
    relative = f"uploads/{owner.pk}/problemes-ete.jsonl"
    assert f"path={relative}" in seen[f"/compare/?runs={ids}"]
    api = json.loads(seen[f"/api/runs/{run.pk}"])
    assert api["config"]["env"]["params"]["path"] == relative
    assert api["config"]["model"]["path"] == "mychat"
    assert api["error"] == f"DatasetError: path: {relative!r} holds no rows"
    header = json.loads(seen["export"].splitlines()[0])
    assert header["config"] == api["config"]
    overrides = json.loads(seen["whatif"])["clone_overrides"]
    assert overrides["reward"]["judges"][0]["model_path"] == "judge"
    assert relative in seen[f"/runs/{run.pk}/"]


def test_a_config_sent_back_with_relative_paths_resolves_to_the_real_ones(
    roots_, owner, enqueued
):
    data, models, upload = roots_
    run = seed_run(owner, name="mine", config=config(data, models, upload, "mine"))
    client = client_for(owner)
    shown = client.get(f"/api/runs/{run.pk}").json()["config"]

    def post(url, payload):
        r = client.post(url, json.dumps(payload), content_type="application/json")
        assert r.status_code == 201, r.content
        return Run.objects.get(pk=r.json()["id"]).config

    again = post("/api/runs", {"config": shown})
    overrides = client.post(
        f"/api/runs/{run.pk}/whatif",
        json.dumps({"weights": {"format": 0}}),
        content_type="application/json",
    ).json()["clone_overrides"]
    clone = post(f"/api/runs/{run.pk}/clone", {"overrides": overrides})
    edited = post(
        f"/api/runs/{run.pk}/clone",
        {"overrides": {"env": {"params": shown["env"]["params"]}}},
    )
    for cfg in (again, clone, edited):
        assert cfg["env"]["params"]["path"] == str(upload.resolve())
        assert cfg["model"]["path"] == str((models / "mychat").resolve())
        assert cfg["reward"]["judges"][0]["model_path"] == str(
            (models / "judge").resolve()
        )
