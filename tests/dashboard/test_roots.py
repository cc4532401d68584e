"""Model and data roots, judge endpoints and ``init_from_run``, checked at submit.

Every refusal is a 400 naming the field, with one message whatever the reason (so an
answer never tells whether a path outside the roots exists), and nothing is stored or
queued.
"""

from __future__ import annotations

import json
import os

import pytest
from dashtest import client_for

from dashboard.library import roots
from dashboard.models import Checkpoint, JudgeEndpoint, Run

pytestmark = pytest.mark.django_db

MODEL_MSG = "config.model.path: must be a directory inside the model roots"


@pytest.fixture
def dirs(tmp_path, settings):
    models, data, outside = tmp_path / "models", tmp_path / "data", tmp_path / "out"
    for d in (models, data, outside):
        d.mkdir()
    (models / "m1").mkdir()
    (models / "m1" / "config.json").write_text("{}")
    (outside / "secret-model").mkdir()
    (data / "rows.jsonl").write_text('{"prompt": "1 + 1 ?", "answer": "2"}\n')
    (outside / "rows.jsonl").write_text('{"prompt": "1 + 1 ?", "answer": "2"}\n')
    settings.MODEL_ROOTS = [models]
    settings.DATA_ROOTS = [data]
    settings.RUNS_DIR = tmp_path / "runs"
    return {"models": models, "data": data, "outside": outside}


def launch(client, config):
    return client.post(
        "/api/runs",
        json.dumps({"config": config}),
        content_type="application/json",
    )


def refused(client, config, enqueued, commit) -> list[str]:
    with commit():
        r = launch(client, config)
    assert r.status_code == 400, r.content
    assert enqueued == [] and Run.objects.count() == 0
    return r.json()["errors"]


def with_model(cfg: dict, path: str) -> dict:
    return {**cfg, "model": {**cfg["model"], "path": path}}


def with_data(cfg: dict, **params) -> dict:
    return {**cfg, "env": {"name": "dataset", "params": params}}


def test_model_paths_outside_missing_dotdot_or_symlinked_out_get_one_message(
    dirs, owner_client, tiny_config, enqueued, commit
):
    os.symlink(dirs["outside"] / "secret-model", dirs["models"] / "link-out")
    for path in (
        str(dirs["outside"] / "secret-model"),  # exists, outside
        str(dirs["outside"] / "no-such-model"),  # missing, outside
        str(dirs["models"] / "no-such-model"),  # missing, inside
        str(dirs["models"] / ".." / "out" / "secret-model"),  # .. out of the root
        "m1/../m1",  # .. even when it would land inside
        "link-out",  # a symlink in the root pointing out of it
        "/etc",
    ):
        errors = refused(owner_client, with_model(tiny_config, path), enqueued, commit)
        assert errors == [MODEL_MSG], path


def test_a_relative_model_path_resolves_against_the_first_root_and_is_stored_real(
    dirs, owner_client, tiny_config, enqueued, commit, settings
):
    second = dirs["outside"].parent / "models2"
    (second / "m2").mkdir(parents=True)
    settings.MODEL_ROOTS = [dirs["models"], second]
    os.symlink(second / "m2", dirs["models"] / "alias")  # root to root: allowed
    with commit():
        a = launch(owner_client, with_model(tiny_config, "m1"))
        b = launch(owner_client, with_model(tiny_config, "alias"))
        c = launch(owner_client, with_model(tiny_config, str(second / "m2")))
    assert [r.status_code for r in (a, b, c)] == [201, 201, 201]
    stored = {r: Run.objects.get(pk=r.json()["id"]).config for r in (a, b)}
    assert stored[a]["model"]["path"] == os.path.realpath(dirs["models"] / "m1")
    assert stored[b]["model"]["path"] == os.path.realpath(second / "m2")
    # the answer names it as the form's picker does, relative to its root
    assert a.json()["config"]["model"]["path"] == "m1"
    assert b.json()["config"]["model"]["path"] == "m2"
    assert len(enqueued) == 3


def test_data_paths_and_corpus_paths_must_be_files_inside_the_data_roots(
    dirs, owner_client, tiny_config, enqueued, commit
):
    os.symlink(dirs["outside"] / "rows.jsonl", dirs["data"] / "link.jsonl")
    msg = "config.env.params.path: must be a file inside the data roots"
    for path in (
        str(dirs["outside"] / "rows.jsonl"),
        str(dirs["outside"] / "missing.jsonl"),
        str(dirs["data"] / "missing.jsonl"),
        "../out/rows.jsonl",
        "link.jsonl",
        str(dirs["data"]),  # a directory, not a file
    ):
        cfg = with_data(tiny_config, path=path)
        assert refused(owner_client, cfg, enqueued, commit) == [msg], path
    cfg = with_data(
        tiny_config,
        path="rows.jsonl",
        tools=["search"],
        corpus_path=str(dirs["outside"] / "rows.jsonl"),
    )
    assert refused(owner_client, cfg, enqueued, commit) == [
        "config.env.params.corpus_path: must be a file inside the data roots"
    ]
    with commit():
        r = launch(owner_client, with_data(tiny_config, path="rows.jsonl"))
    assert r.status_code == 201, r.content
    stored = Run.objects.get(pk=r.json()["id"]).config
    assert stored["env"]["params"]["path"] == os.path.realpath(
        dirs["data"] / "rows.jsonl"
    )
    assert r.json()["config"]["env"]["params"]["path"] == "rows.jsonl"


def test_another_users_upload_is_refused_like_a_missing_file(
    dirs, owner, other, tiny_config, enqueued, commit
):
    theirs = roots.uploads_dir(other.pk) / "rows.jsonl"
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"prompt": "p", "answer": "a"}\n')
    mine = roots.uploads_dir(owner.pk) / "rows.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text('{"prompt": "p", "answer": "a"}\n')
    client = client_for(owner)
    assert refused(client, with_data(tiny_config, path=str(theirs)), enqueued, commit)
    with commit():
        r = launch(client, with_data(tiny_config, path=str(mine)))
    assert r.status_code == 201, r.content


def test_a_judges_model_path_and_endpoint_are_checked_at_submit(
    dirs, owner_client, tiny_config, enqueued, commit
):
    JudgeEndpoint.objects.create(name="ok", base_url="http://127.0.0.1:9/v1")
    JudgeEndpoint.objects.create(
        name="off", base_url="http://127.0.0.1:9/v1", enabled=False
    )
    rubric = [{"name": "quality", "description": "is it good"}]
    cfg = {
        **tiny_config,
        "reward": {
            "components": [{"name": "outcome"}],
            "judges": [
                {
                    "name": "a",
                    "backend": "hf",
                    "rubric": rubric,
                    "model_path": str(dirs["outside"] / "secret-model"),
                },
                {"name": "b", "backend": "openai", "rubric": rubric, "endpoint": "off"},
                {
                    "name": "c",
                    "backend": "openai",
                    "rubric": rubric,
                    "endpoint": "nope",
                },
                {"name": "d", "backend": "openai", "rubric": rubric, "endpoint": "ok"},
            ],
        },
    }
    assert refused(owner_client, cfg, enqueued, commit) == [
        "config.reward.judges.0.model_path: must be a directory inside the model roots",
        "config.reward.judges.1.endpoint: must name an enabled judge endpoint of the "
        "allow-list",
        "config.reward.judges.2.endpoint: must name an enabled judge endpoint of the "
        "allow-list",
    ]


def _checkpointed(run: Run, step: int = 2) -> None:
    from dashboard.runs.execution import checkpoint_dir

    path = checkpoint_dir(run.pk) / f"step-{step:06d}"
    path.mkdir(parents=True)
    (path / "policy.safetensors").write_bytes(b"")
    Checkpoint.objects.create(run=run, step=step, path="/anything/the/run/said")


def test_init_from_run_is_authorised_like_a_read(
    dirs, owner, other, tiny_config, enqueued, commit
):
    mine = Run.objects.create(owner=owner, name="mine", config=tiny_config)
    theirs = Run.objects.create(owner=other, name="theirs", config=tiny_config)
    empty = Run.objects.create(owner=owner, name="empty", config=tiny_config)
    _checkpointed(mine)
    _checkpointed(theirs)
    client = client_for(owner)

    def init(run_id):
        return {
            **tiny_config,
            "model": {**tiny_config["model"], "init_from_run": run_id},
        }

    runs = Run.objects.count()
    for run_id in (str(theirs.pk), "0b7e4b36-1c0b-4f3e-9a57-3f6f1c3f3a11", "nope"):
        with commit():
            r = launch(client, init(run_id))
        assert r.status_code == 400
        assert r.json()["errors"] == ["config.model.init_from_run: no such run"]
    with commit():
        r = launch(client, init(str(empty.pk)))
    assert r.json()["errors"] == [
        "config.model.init_from_run: that run has no checkpoint on this platform"
    ]
    other_model = {
        **init(str(mine.pk)),
        "model": {"size": "small", "init_from_run": str(mine.pk)},
    }
    with commit():
        r = launch(client, other_model)
    assert r.status_code == 400 and "another model" in r.json()["errors"][0]
    assert enqueued == [] and Run.objects.count() == runs
    with commit():
        r = launch(client, init(str(mine.pk)))
    assert r.status_code == 201, r.content


def test_the_worker_starts_from_the_newest_recorded_checkpoint_on_disk(
    dirs, owner, tiny_config, settings
):
    from dashboard.runs.execution import checkpoint_dir, init_kwargs
    from trainer.config import TrainConfig

    src = Run.objects.create(owner=owner, name="src", config=tiny_config)
    _checkpointed(src, 2)
    _checkpointed(src, 4)
    unrecorded = checkpoint_dir(src.pk) / "step-000006"
    unrecorded.mkdir()
    (unrecorded / "policy.safetensors").write_bytes(b"")
    cfg = TrainConfig.model_validate(
        {**tiny_config, "model": {"init_from_run": str(src.pk)}}
    )
    assert init_kwargs(cfg) == {
        "init_checkpoint": str(checkpoint_dir(src.pk) / "step-000004")
    }
    assert init_kwargs(TrainConfig.model_validate(tiny_config)) == {}


def test_the_form_shows_a_path_refusal_next_to_the_field(
    dirs, owner_client, enqueued, commit, settings
):
    from test_pages_form import body, post_for

    q = post_for("calc", **{"model.path": str(dirs["outside"] / "secret-model")})
    with commit():
        r = owner_client.post("/runs/new/", body(q))
    assert r.status_code == 400
    html = r.content.decode()
    field = html[html.index('data-field="model.path"') :]
    field = field[: field.index('data-field="model.size"')]
    assert "<li>must be a directory inside the model roots</li>" in field
    assert enqueued == [] and Run.objects.count() == 0
    check = owner_client.post("/runs/new/check/", body(q)).json()
    assert check["ok"] is False
    assert check["errors"]["model.path"] == [
        "must be a directory inside the model roots"
    ]
