"""No server path on a page (the README's promise): a run's model, its kept
model's base, a dataset's "Use in a new run" and a clone's form show a path as the
form's pickers name it, relative to its root; a newcomer saw
/tmp/walk1/var/models/mychat-llama in four places. The stored config keeps the real
path the trainer opens, and a clone naming the parent's model relatively is no
change from it."""

from __future__ import annotations

import pytest

from dashboard.library import roots
from dashboard.models import Run
from tests.dashboard.test_pages_form import as_post, body, values_from_config
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def dirs(tmp_path, settings):
    first, second, data = tmp_path / "m1", tmp_path / "m2", tmp_path / "data"
    for d in (
        first / "mine",
        second / "chat" / "v1",
        second / "mine",
        data / "uploads" / "7",
    ):
        d.mkdir(parents=True)
    (data / "uploads" / "7" / "arith.jsonl").write_text("{}\n")
    settings.MODEL_ROOTS, settings.DATA_ROOTS = [first, second], [data]
    return first, second, data


def test_a_path_shows_relative_to_the_first_root_that_names_it(dirs, tmp_path):
    first, second, data = dirs
    assert roots.shown(str(second / "chat" / "v1"), model=True) == "chat/v1"
    assert roots.shown(str(first / "mine"), model=True) == "mine"
    # the same relative path in an earlier root: the relative path would name that
    assert roots.shown(str(second / "mine"), model=True) == str(second / "mine")
    upload = str(data / "uploads" / "7" / "arith.jsonl")
    assert roots.shown(upload, model=False) == "uploads/7/arith.jsonl"
    outside = str(tmp_path / "elsewhere")
    assert roots.shown(outside, model=True) == outside
    assert roots.shown(str(first), model=True) == str(first)  # a root itself


def test_the_run_page_and_a_clone_show_the_model_relative_and_the_clone_is_no_change(
    dirs, owner, owner_client
):
    _, second, _ = dirs
    real = str(second / "chat" / "v1")
    parent = seed_run(owner, name="parent", env="calc", steps=2)
    parent.config["model"]["path"] = real
    parent.save(update_fields=["config"])
    page = owner_client.get(f"/runs/{parent.pk}/").content.decode()
    assert "<span>model chat/v1</span>" in page and real not in page
    clone = owner_client.get(f"/runs/{parent.pk}/clone/").content.decode()
    assert 'value="chat/v1"' in clone and real not in clone
    data = as_post(values_from_config(parent.config), name="parent")
    data["model.path"] = "chat/v1"
    res = owner_client.post(f"/runs/{parent.pk}/clone/check/", body(data)).json()
    assert not [d for d in res["diff"] if d["path"] == "model.path"], res["diff"]
    assert Run.objects.filter(pk=parent.pk).get().config["model"]["path"] == real
