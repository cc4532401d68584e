"""``/datasets/``: uploads validated by the trainer's reader, stored per owner under the
first data root, previewed escaped, deleted; anyone else's dataset is a 404."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from dashtest import ROOT, client_for
from django.core.files.uploadedfile import SimpleUploadedFile

from dashboard.library import datasets, roots
from dashboard.models import Dataset

pytestmark = pytest.mark.django_db

GOOD = (
    json.dumps({"prompt": "what is 7 + 5 ?", "answer": 12})
    + "\n"
    + json.dumps({"prompt": "<script>alert(1)</script>", "answer": "x"})
    + "\n"
    + json.dumps({"prompt": "2 * 3 ?", "answer": "6", "level": 1})
    + "\n"
)


def upload(client, name: str, content: bytes | str, **fields):
    if isinstance(content, str):
        content = content.encode()
    return client.post(
        "/datasets/", {"file": SimpleUploadedFile(name, content), **fields}
    )


def stored(owner) -> list[str]:
    folder = roots.uploads_dir(owner.pk)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_upload_is_validated_stored_under_the_owner_and_previewed_escaped(
    data_root, owner
):
    client = client_for(owner)
    r = upload(client, "arith.jsonl", GOOD)
    assert r.status_code == 302, r.content
    ds = Dataset.objects.get(owner=owner)
    assert (ds.name, ds.rows, ds.fields) == ("arith.jsonl", 3, ["prompt", "answer"])
    assert ds.path == str(data_root / "uploads" / str(owner.pk) / "arith.jsonl")
    assert ds.size == len(GOOD.encode()) and stored(owner) == ["arith.jsonl"]

    html = client.get(r["Location"]).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html
    assert "what is 7 + 5 ?" in html and ">level<" in html  # columns of every row
    listing = client.get("/datasets/").content.decode()
    assert 'data-dataset="arith.jsonl"' in listing and "<td>3</td>" in listing

    # "Use in a new run" opens the form on the dataset environment with its path.
    new = client.get(f"/runs/new/?env=dataset&dataset={ds.pk}").content.decode()
    field = re.search(r'name="envp\.dataset\.path"[^>]*value="([^"]*)"', new)
    # relative to its data root, as the form's picker names it: no server path
    assert field and field.group(1) == f"uploads/{owner.pk}/arith.jsonl"
    assert roots.resolve(
        field.group(1), roots.data_roots(), want_dir=False, owner_id=owner.pk
    ) == str(Path(ds.path).resolve())
    assert re.search(r'name="env.name" value="dataset" checked', new)


def test_a_malformed_upload_reports_its_first_bad_line_and_stores_nothing(
    data_root, owner
):
    client = client_for(owner)
    bad = GOOD + "{not json\n" + '{"prompt": "no answer"}\n'
    r = upload(client, "bad.jsonl", bad)
    assert r.status_code == 400
    assert "file: line 4 is not valid JSON" in r.content.decode()
    r = upload(client, "noanswer.jsonl", GOOD + '{"prompt": "no answer"}\n')
    assert r.status_code == 400
    assert "Answer field: line 4 has no &#x27;answer&#x27; field" in r.content.decode()
    r = upload(client, "rows.csv", "question,answer\n1 + 1 ?,2\n", prompt_key="q")
    assert r.status_code == 400 and "Prompt field: line 2 has no" in r.content.decode()
    r = upload(client, "notes.txt", GOOD)
    assert r.status_code == 400 and "file: must be one of" in r.content.decode()
    # Accepted before, and its page a 500 from then on; a number Python won't read.
    r = upload(client, "lone.jsonl", GOOD + '{"prompt": "\\ud800", "answer": "x"}\n')
    assert r.status_code == 400
    assert "file: line 4 has a lone surrogate escape" in r.content.decode()
    r = upload(client, "big.jsonl", '{"prompt": "a", "answer": ' + "9" * 5000 + "}\n")
    assert r.status_code == 400
    assert "file: line 1 is not valid JSON (Exceeds" in r.content.decode()
    assert Dataset.objects.count() == 0 and stored(owner) == []


def test_an_oversized_upload_is_refused_and_nothing_is_stored(
    data_root, owner, settings
):
    settings.DATASET_MAX_UPLOAD_BYTES = 100
    r = upload(client_for(owner), "big.jsonl", GOOD)
    assert r.status_code == 400
    assert "larger than the limit of 100 bytes" in r.content.decode()
    assert Dataset.objects.count() == 0 and stored(owner) == []


def test_a_csv_upload_and_a_second_one_with_the_same_name(data_root, owner):
    client = client_for(owner)
    csv = "question,reference\n1 + 1 ?,2\n2 + 2 ?,4\n"
    r = upload(client, "sums.csv", csv, prompt_key="question", answer_key="reference")
    assert r.status_code == 302, r.content
    ds = Dataset.objects.get()
    assert (ds.rows, ds.fields, ds.prompt_key) == (
        2,
        ["question", "reference"],
        "question",
    )
    r = upload(client, "sums.csv", csv, prompt_key="question", answer_key="reference")
    assert r.status_code == 409 and Dataset.objects.count() == 1
    assert stored(owner) == ["sums.csv"]


def _parquet(rows: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def test_a_parquet_upload_is_read_stored_and_previewed(data_root, owner):
    """Parquet is documented, so pyarrow is a runtime requirement (requirements.txt
    pins it as requirements-bench.txt does) and the form accepts .parquet."""
    client = client_for(owner)
    assert ".parquet" in datasets.formats()
    assert "or Parquet" in client.get("/datasets/").content.decode()
    rows = [
        {"question": "what is 7 + 5 ?", "answer": "12", "level": 1},
        {"question": "<b>bold</b> 2 * 3 ?", "answer": "6", "level": 2},
    ]
    r = upload(client, "arith.parquet", _parquet(rows), prompt_key="question")
    assert r.status_code == 302, r.content
    ds = Dataset.objects.get(owner=owner)
    assert (ds.rows, ds.fields) == (2, ["question", "answer", "level"])
    html = client.get(r["Location"]).content.decode()
    assert "&lt;b&gt;bold&lt;/b&gt; 2 * 3 ?" in html and "<b>bold" not in html
    r = upload(client, "broken.parquet", b"PAR1 not really")
    assert r.status_code == 400 and "file: not a readable Parquet file" in (
        r.content.decode()
    )
    r = upload(client, "short.parquet", _parquet([{"question": "1 + 1 ?"}]))
    assert r.status_code == 400
    assert "Prompt field: row 1 has no &#x27;prompt&#x27; field" in r.content.decode()
    assert stored(owner) == ["arith.parquet"]


def test_requirements_pin_pyarrow_as_the_bench_extra_does():
    def pin(name: str) -> str:
        return next(
            line.split("#")[0].strip()
            for line in (ROOT / name).read_text().splitlines()
            if line.startswith("pyarrow==")
        )

    assert pin("requirements.txt") == pin("requirements-bench.txt") == "pyarrow==26.0.1"


def test_another_users_dataset_is_a_404_and_delete_removes_the_file(
    data_root, owner, other
):
    assert upload(client_for(owner), "arith.jsonl", GOOD).status_code == 302
    ds = Dataset.objects.get()
    them = client_for(other)
    assert them.get(f"/datasets/{ds.pk}/").status_code == 404
    assert them.post(f"/datasets/{ds.pk}/delete/").status_code == 404
    assert them.get(f"/runs/new/?env=dataset&dataset={ds.pk}").status_code == 404
    assert "arith.jsonl" not in them.get("/datasets/").content.decode()
    assert Dataset.objects.count() == 1 and stored(owner) == ["arith.jsonl"]
    r = client_for(owner).post(f"/datasets/{ds.pk}/delete/")
    assert r.status_code == 302
    assert Dataset.objects.count() == 0 and stored(owner) == []


def test_a_run_on_an_uploaded_dataset_passes_the_roots_check_for_its_owner_only(
    data_root, owner, other, enqueued, commit
):
    assert upload(client_for(owner), "arith.jsonl", GOOD).status_code == 302
    ds = Dataset.objects.get()
    config = {
        "steps": 1,
        "model": {"device": "cpu"},
        "env": {"name": "dataset", "params": {"path": ds.path}},
    }
    body = json.dumps({"config": config})
    with commit():
        mine = client_for(owner).post(
            "/api/runs", body, content_type="application/json"
        )
        theirs = client_for(other).post(
            "/api/runs", body, content_type="application/json"
        )
    assert mine.status_code == 201, mine.content
    assert theirs.status_code == 400
    assert theirs.json()["errors"] == [
        "config.env.params.path: must be a file inside the data roots"
    ]
    assert len(enqueued) == 1
