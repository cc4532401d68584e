"""Errors in the words the user sees: a NUL in a page's query is the site's own 400
page naming the parameter (it was a bare "Bad request" page without the layout); an
unknown environment names ``env.name`` and the environments there are (pydantic's
message named our tag function, ``_env_tag()``); a dataset upload's error names the
field as the upload form labels it ("Prompt field", not ``prompt_key``)."""

from __future__ import annotations

import json

import pytest
from dashtest import client_for
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

pytestmark = pytest.mark.django_db


# --- 4: a NUL in a page's query ----------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["/runs/?group=%00", "/runs/?q=a%00&x%00y=1", "/datasets/?g=%00", "/?a=%00"]
)
def test_a_nul_in_a_pages_query_is_the_sites_styled_400_naming_it(owner, url):
    r = client_for(owner).get(url)
    assert r.status_code == 400
    assert r["Content-Type"].startswith("text/html")
    html = r.content.decode()
    # the site's layout (stylesheet, navigation), as the runs list's ?status=nope
    assert "css/app.css" in html and 'aria-label="Main"' in html
    assert "data-request-errors" in html
    name = url.split("?")[1].split("=")[0].replace("%00", "?")
    assert f"<li>{name}: must not contain NUL characters</li>" in html
    assert "default-src &#x27;self&#x27;" not in html  # a header, not page text
    assert "default-src 'self'" in r["Content-Security-Policy"]


def test_a_signed_out_visitor_gets_the_styled_400_too(db):
    r = Client().get("/runs/?group=%00")
    assert r.status_code == 400 and "css/app.css" in r.content.decode()
    assert "group: must not contain NUL characters" in r.content.decode()


def test_the_api_and_trackio_keep_their_json(owner):
    c = client_for(owner)
    r = c.get("/api/runs?group=%00")
    assert r.status_code == 400 and r.json()["errors"] == [
        "group: must not contain NUL characters"
    ]
    r = c.get("/trackio/version?write_token=%00")
    assert "write_token: must not contain NUL" in r.json()["error"]


# --- 5: an unknown environment -------------------------------------------------------------
def test_an_unknown_environment_names_the_field_and_the_choices(owner, tiny_config):
    config = {**tiny_config, "env": {"name": "nope"}}
    r = client_for(owner).post(
        "/api/runs", json.dumps({"config": config}), content_type="application/json"
    )
    assert r.status_code == 400
    body = r.content.decode()
    assert "_env_tag" not in body and "Input tag" not in body
    from trainer.config import ENV_NAMES

    assert r.json()["errors"] == [
        "config.env.name: 'nope' is not an environment of this server; choose one "
        f"of: {', '.join(ENV_NAMES)}"
    ]


def test_the_run_form_files_an_unknown_environment_under_it(owner):
    from trainer.config import TrainConfig, format_errors

    with pytest.raises(Exception) as exc:
        TrainConfig.model_validate({"env": {"name": None}})
    (line,) = format_errors(exc.value)
    assert line.startswith("env.name: None is not an environment of this server")


# --- 6: the dataset upload's field names ---------------------------------------------------
def upload(client, name: str, content: str, **fields):
    file = SimpleUploadedFile(name, content.encode())
    return client.post("/datasets/", {"file": file, **fields})


def test_a_dataset_error_names_the_field_as_the_form_labels_it(data_root, owner):
    c = client_for(owner)
    html = c.get("/datasets/").content.decode()
    assert "Prompt field <input" in html and "Answer field <input" in html
    r = upload(c, "rows.csv", "question,answer\n1 + 1 ?,2\n", prompt_key="q")
    html = r.content.decode()
    assert r.status_code == 400
    assert "<li>Prompt field: line 2 has no &#x27;q&#x27; field" in html
    assert "prompt_key:" not in html
    assert 'name="prompt_key" maxlength="64" value="q" aria-invalid="true"' in html
    assert 'name="answer_key" maxlength="64" value="answer">' in html
    r = upload(c, "rows.csv", "question,answer\n1 + 1 ?,2\n", answer_key="bad key!")
    html = r.content.decode()
    assert "<li>Answer field: letters, digits" in html and "answer_key:" not in html
    r = upload(c, "rows.jsonl", '{"prompt": "p"}\n', answer_key="<b>a</b>")
    assert "&lt;b&gt;a&lt;/b&gt;" in r.content.decode()
    assert "<b>a</b>" not in r.content.decode()
