"""What only building the environment tells is refused before launch, beside its
field: a newcomer set Prompt key to ``prompt`` on a dataset of ``question`` and
``answer``; the form said "Valid configuration" (its memory estimate a guess, as the
budget could not build the environment), the launch was accepted and the run failed
with "DatasetError: prompt_key: line 1 has no 'prompt' field"."""

from __future__ import annotations

import json
import os

import pytest
from dashtest import client_for

from dashboard.models import Run
from dashboard.pages.forms import default_config, values_from_config
from dashboard.runs import envcheck
from tests.dashboard.test_pages_form import as_post, body

pytestmark = pytest.mark.django_db

ROWS = "".join(
    json.dumps({"question": f"{i} + 1 ?", "answer": str(i + 1), "key": f"k{i}"}) + "\n"
    for i in range(12)
)


@pytest.fixture
def data(tmp_path, settings):
    root = tmp_path / "data"
    root.mkdir()
    (root / "sums.jsonl").write_text(ROWS)
    (root / "one.jsonl").write_text(ROWS.splitlines()[0] + "\n")
    (root / "blank.jsonl").write_text("\n\n")
    settings.DATA_ROOTS, settings.MODEL_ROOTS = [root], [tmp_path / "models"]
    envcheck._build.cache_clear()
    return root


def form(**params):
    params = {"path": "sums.jsonl", "prompt_key": "question", **params}
    return as_post(values_from_config(default_config("dataset", "grpo", params)))


def check(client, data):
    return client.post("/runs/new/check/", body(data)).json()


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        (
            {"prompt_key": "prompt"},
            "prompt_key",
            "line 1 has no 'prompt' field (its fields: question, answer, key)",
        ),
        (
            {"answer_key": "solution"},
            "answer_key",
            "line 1 has no 'solution' field (its fields: question, answer, key)",
        ),
        (
            {"id_key": "uid"},
            "id_key",
            "line 1 has no 'uid' field (its fields: question, answer, key)",
        ),
        (
            {"path": "one.jsonl", "holdout": 0.9},
            "holdout",
            "the 'train' split of 1 rows is empty",
        ),
        ({"path": "blank.jsonl"}, "path", "'blank.jsonl' holds no rows"),
    ],
)
def test_the_check_and_the_launch_refuse_a_dataset_the_environment_cannot_read(
    data, owner, enqueued, params, field, message
):
    client = client_for(owner)
    res = check(client, form(**params))
    assert res["ok"] is False and res["estimate"] is None
    assert res["errors"] == {f"envp.dataset.{field}": [message]}
    assert str(data) not in json.dumps(res)  # the file as the form names it

    page = client.post("/runs/new/", body(form(**params)))
    assert page.status_code == 400
    html = page.content.decode()
    start = html.index(f'data-errors-for="envp.dataset.{field}"')
    assert message.replace("'", "&#x27;") in html[start : html.index("</ul>", start)]

    cfg = default_config(
        "dataset", "grpo", {"path": "sums.jsonl", "prompt_key": "question", **params}
    )
    api = client.post(
        "/api/runs", json.dumps({"config": cfg}), content_type="application/json"
    )
    assert api.status_code == 400
    assert api.json()["errors"] == [f"config.env.params.{field}: {message}"]
    assert Run.objects.count() == 0 and enqueued == []


def test_a_dataset_it_can_read_is_valid_with_its_estimate(data, owner, enqueued):
    client = client_for(owner)
    res = check(client, form(id_key="key"))
    assert res["ok"] is True, res["errors"]
    assert res["errors"] == {} and "A step:" in res["estimate"]
    assert client.post("/runs/new/", body(form(id_key="key"))).status_code == 302
    assert Run.objects.count() == 1


def test_the_environment_is_built_once_per_file_and_again_when_it_changes(
    data, owner, monkeypatch
):
    import trainer.envs.base as base

    built = []
    real = base.make_env
    monkeypatch.setattr(
        base, "make_env", lambda *a, **k: built.append(a[0]) or real(*a, **k)
    )
    client = client_for(owner)
    assert check(client, form())["ok"] is True  # the check and the estimate: one build
    assert check(client, form(**{})) and len(built) == 1  # as the user types on
    path = data / "sums.jsonl"
    path.write_text(ROWS.replace('"question"', '"q"'))
    os.utime(path, ns=(1, 1))
    res = check(client, form())
    assert len(built) == 2 and res["errors"] == {
        "envp.dataset.prompt_key": [
            "line 1 has no 'question' field (its fields: q, answer, key)"
        ]
    }
