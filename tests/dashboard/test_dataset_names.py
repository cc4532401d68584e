"""A dataset's name in any script: a newcomer's ``problèmes_数学 été.jsonl`` was
stored (and named) ``problemes_-ete.jsonl``, its CJK dropped without a word, and
``数学.jsonl`` with Name left empty was refused ("give the dataset a name of letters
and digits") though 数学 are letters. The name is kept as given (pages escape it);
the file on the server takes a safe ASCII version of it, never empty or mangled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dashtest import client_for
from django.core.files.uploadedfile import SimpleUploadedFile

from dashboard.library import roots
from dashboard.library.filenames import ascii_name
from dashboard.models import Dataset

pytestmark = pytest.mark.django_db

ROWS = json.dumps({"prompt": "1 + 1 ?", "answer": "2"}) + "\n"


def upload(client, filename: str, name: str = "", content: str = ROWS):
    return client.post(
        "/datasets/",
        {"file": SimpleUploadedFile(filename, content.encode()), "name": name},
    )


def files(owner) -> list[str]:
    return sorted(p.name for p in roots.uploads_dir(owner.pk).iterdir())


def test_no_dangling_separators_where_letters_were_dropped():
    assert ascii_name("problèmes_数学 été", 120) == "problemes-ete"
    assert ascii_name("_数学_", 120) == ""


def test_a_name_in_any_script_is_kept_and_its_file_is_a_safe_ascii_name(
    data_root, owner
):
    client = client_for(owner)
    r = upload(client, "problèmes_数学 été.jsonl")
    assert r.status_code == 302, r.content
    ds = Dataset.objects.get(owner=owner)
    assert ds.name == "problèmes_数学 été.jsonl"
    assert Path(ds.path).name == "problemes-ete.jsonl"
    assert Path(ds.path).read_text() == ROWS

    r = upload(client, "数学.jsonl")  # Name left empty: the file's name is the name
    assert r.status_code == 302, r.content
    cjk = Dataset.objects.get(owner=owner, name="数学.jsonl")
    assert re.fullmatch(r"dataset-[0-9a-f]{8}\.jsonl", Path(cjk.path).name), cjk.path
    assert files(owner) == sorted(["problemes-ete.jsonl", Path(cjk.path).name])

    listing = client.get("/datasets/").content.decode()
    assert ">problèmes_数学 été.jsonl</a>" in listing and ">数学.jsonl</a>" in listing
    page = client.get(f"/datasets/{cjk.pk}/").content.decode()
    assert "<h1>数学.jsonl</h1>" in page
    # "Use in a new run" names the stored file, relative to its root; it resolves.
    new = client.get(f"/runs/new/?env=dataset&dataset={cjk.pk}").content.decode()
    field = re.search(r'name="envp\.dataset\.path"[^>]*value="([^"]*)"', new)
    assert field and field.group(1) == f"uploads/{owner.pk}/{Path(cjk.path).name}"
    assert roots.resolve(
        field.group(1), roots.data_roots(), want_dir=False, owner_id=owner.pk
    ) == str(Path(cjk.path).resolve())


def test_a_typed_name_is_escaped_and_two_names_of_one_ascii_file_both_keep_theirs(
    data_root, owner
):
    client = client_for(owner)
    assert upload(client, "up.jsonl", "café", ROWS).status_code == 302
    other = ROWS.replace("2", "3")
    assert upload(client, "up.jsonl", "cafe", other).status_code == 302
    first = Dataset.objects.get(owner=owner, name="café.jsonl")
    second = Dataset.objects.get(owner=owner, name="cafe.jsonl")
    assert Path(first.path).name == "cafe.jsonl" != Path(second.path).name
    assert Path(first.path).read_text() == ROWS  # not overwritten by the second
    assert Path(second.path).read_text() == other
    assert upload(client, "x.jsonl", "café").status_code == 409  # the same name

    assert upload(client, "up.jsonl", "v1.2 数").status_code == 302  # no format
    assert Dataset.objects.filter(name="v1.2 数.jsonl").exists()
    assert upload(client, "up.jsonl", "<b>bold<b> 数").status_code == 302
    listing = client.get("/datasets/").content.decode()
    assert "&lt;b&gt;bold&lt;b&gt; 数.jsonl" in listing and "<b>bold" not in listing


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a/b", "no path separators"),
        ("a\\b", "no path separators"),
        ("evil\u202etxt", "control characters"),
        ("tab\there", "control characters"),
        ("-- ..", "letters or digits"),
    ],
)
def test_a_name_with_a_separator_a_control_character_or_no_letter_is_refused(
    data_root, owner, name, message
):
    r = upload(client_for(owner), "up.jsonl", name)
    assert r.status_code == 400 and message in r.content.decode()
    assert Dataset.objects.count() == 0
    assert not roots.uploads_dir(owner.pk).exists() or files(owner) == []


def test_a_run_page_names_the_upload_it_reads(data_root, owner, staff):
    """A newcomer's run of 数学.jsonl said only "env dataset" (its config the stored
    file, uploads/1/dataset-2c04af4c.jsonl): the page names the upload, escaped, and
    links its owner to it."""
    from dashboard.models import Run

    client = client_for(owner)
    assert upload(client, "数学 <i>.jsonl").status_code == 302
    ds = Dataset.objects.get(owner=owner)
    config = {"env": {"name": "dataset", "params": {"path": ds.path}}}
    run = Run.objects.create(owner=owner, name="r", config=config)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    link = f'<a href="/datasets/{ds.pk}/" data-run-dataset>数学 &lt;i&gt;.jsonl</a>'
    assert f"env dataset: {link}" in page
    seen = client_for(staff).get(f"/runs/{run.pk}/").content.decode()
    assert "<span data-run-dataset>数学 &lt;i&gt;.jsonl</span>" in seen  # no link
    other = Run.objects.create(owner=owner, name="o", config={"env": {"name": "calc"}})
    assert "data-run-dataset" not in client.get(f"/runs/{other.pk}/").content.decode()


def test_the_upload_is_found_through_a_symlinked_data_root(tmp_path, settings, owner):
    """The run's config holds the resolved path (the form's check resolves it), the
    upload the path under the data root as configured: through a symlink (macOS's
    /tmp, a Docker volume) they differ, and the run page named nothing."""
    import os

    from dashboard.library.datasets import dataset_of_run
    from dashboard.models import Run

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "data").symlink_to(real)
    settings.DATA_ROOTS, settings.MODEL_ROOTS = [tmp_path / "data"], [tmp_path]
    assert upload(client_for(owner), "数学.jsonl").status_code == 302
    ds = Dataset.objects.get(owner=owner)
    resolved = os.path.realpath(ds.path)
    assert resolved != ds.path
    config = {"env": {"name": "dataset", "params": {"path": resolved}}}
    run = Run.objects.create(owner=owner, name="r", config=config)
    assert dataset_of_run(run) == ds
    # an upload made after an earlier run, its file name reused, is not that run's
    Run.objects.filter(pk=run.pk).update(created_at=ds.created_at.replace(year=2000))
    run.refresh_from_db()
    assert dataset_of_run(run) is None
