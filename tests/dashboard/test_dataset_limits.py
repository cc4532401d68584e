"""Uploads are held to the row limits (issue 21.3): each refusal is a 400 naming the
line, the field and the setting, and nothing is stored; the preview is stored at
upload (showing it reads no file), and a dataset stored without one gets it computed
once, bounded, and stored."""

from __future__ import annotations

import json

import pytest
from dashtest import client_for
from django.core.files.uploadedfile import SimpleUploadedFile

from dashboard.library import roots
from dashboard.models import Dataset
from trainer.envs.dataset_files import read_rows
from trainer.envs.row_limits import TRAINER_LIMITS

pytestmark = pytest.mark.django_db

ROW = json.dumps({"prompt": "what is 7 + 5 ?", "answer": 12}) + "\n"


def upload(owner, name: str, content: str, **fields):
    return client_for(owner).post(
        "/datasets/", {"file": SimpleUploadedFile(name, content.encode()), **fields}
    )


def stored(owner) -> list[str]:
    folder = roots.uploads_dir(owner.pk)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _errors(response) -> str:
    return response.content.decode().replace("&#x27;", "'")


@pytest.mark.parametrize(
    ("setting", "value", "bad_line", "message"),
    [
        (
            "DATASET_MAX_ROW_BYTES",
            200,
            json.dumps({"prompt": "x" * 300, "answer": 1}) + "\n",
            "file: line 3 is longer than the limit of 200 bytes (DATASET_MAX_ROW_BYTES)",
        ),
        (
            "DATASET_MAX_ROW_VALUES",
            50,
            '{"prompt": "p", "answer": 1, "pad": [' + "[]," * 60 + "[]]}\n",
            "file: line 3 holds more than the limit of 50 values "
            "(DATASET_MAX_ROW_VALUES)",
        ),
        (
            "DATASET_MAX_ROW_DEPTH",
            8,
            '{"prompt": "p", "answer": 1, "pad": ' + "[" * 20 + "]" * 20 + "}\n",
            "file: line 3 nests deeper than the limit of 8 levels "
            "(DATASET_MAX_ROW_DEPTH)",
        ),
        (
            "DATASET_MAX_ROWS",
            2,
            ROW,
            "file: line 3 is past the limit of 2 rows (DATASET_MAX_ROWS)",
        ),
    ],
)
def test_a_row_over_a_limit_is_a_400_naming_line_and_setting_and_stores_nothing(
    data_root, owner, settings, setting, value, bad_line, message
):
    setattr(settings, setting, value)
    r = upload(owner, "limits.jsonl", ROW * 2 + bad_line + ROW)
    assert r.status_code == 400
    assert message in _errors(r)
    assert Dataset.objects.count() == 0 and stored(owner) == []


def test_a_csv_record_over_the_byte_limit_is_refused(data_root, owner, settings):
    settings.DATASET_MAX_ROW_BYTES = 100
    r = upload(owner, "long.csv", "prompt,answer\nhi,1\n" + "y" * 200 + ",2\n")
    assert r.status_code == 400
    assert (
        "file: line 3 is longer than the limit of 100 bytes (DATASET_MAX_ROW_BYTES)"
        in _errors(r)
    )
    assert stored(owner) == []


def test_the_preview_is_stored_at_upload_and_shown_without_reading_the_file(
    data_root, owner
):
    rows = [
        {"prompt": "<b>bold</b>", "answer": 12, "meta": {"level": 1}},
        {"prompt": "2 * 3 ?", "answer": "6", "tags": ["a", "b"]},
    ]
    r = upload(owner, "arith.jsonl", "".join(json.dumps(x) + "\n" for x in rows))
    assert r.status_code == 302, r.content
    ds = Dataset.objects.get()
    assert ds.preview == {
        "columns": ["prompt", "answer", "meta", "tags"],
        "types": ["string", "number", "object", "list"],
        "rows": [
            ["<b>bold</b>", "12", '{"level": 1}', "null"],
            ["2 * 3 ?", "6", "null", '["a", "b"]'],
        ],
        "error": "",
    }
    # The run reads the file the upload checked, and finds the same rows.
    assert len(read_rows(ds.path)) == ds.rows == 2
    (data_root / "uploads" / str(owner.pk) / "arith.jsonl").unlink()
    html = client_for(owner).get(f"/datasets/{ds.pk}/").content.decode()
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold" not in html
    assert '<th class="muted small" data-type>object</th>' in html


def test_a_dataset_stored_without_a_preview_gets_one_once_bounded(
    data_root, owner, settings
):
    folder = roots.uploads_dir(owner.pk)
    folder.mkdir(parents=True)
    good = folder / "old.jsonl"
    good.write_text(ROW * 10)
    bomb = folder / "bomb.jsonl"
    bomb.write_text('{"prompt": "p", "answer": 1, "pad": [' + "[]," * 1000 + "[]]}\n")
    fields = {"owner": owner, "rows": 1, "size": 1}
    old = Dataset.objects.create(name="old.jsonl", path=str(good), **fields)
    bad = Dataset.objects.create(name="bomb.jsonl", path=str(bomb), **fields)
    assert old.preview is None and bad.preview is None
    settings.DATASET_MAX_ROW_BYTES = 1000
    client = client_for(owner)

    html = client.get(f"/datasets/{old.pk}/").content.decode()
    assert html.count("what is 7 + 5 ?") == 5  # the first five rows only
    old.refresh_from_db()
    assert old.preview["columns"] == ["prompt", "answer"]
    assert len(old.preview["rows"]) == 5

    html = client.get(f"/datasets/{bad.pk}/").content.decode()
    message = "file: line 1 is longer than the limit of 1000 bytes"
    assert message in html
    bad.refresh_from_db()
    assert bad.preview["error"].startswith(message)

    good.unlink()  # stored: the second view reads the database only
    assert client.get(f"/datasets/{old.pk}/").content.decode().count("7 + 5") == 5


def test_a_missing_file_is_said_and_no_preview_is_stored(data_root, owner):
    ds = Dataset.objects.create(
        owner=owner, name="gone.jsonl", path=str(data_root / "gone"), rows=1, size=1
    )
    html = client_for(owner).get(f"/datasets/{ds.pk}/").content.decode()
    assert "The file cannot be read any more." in html
    ds.refresh_from_db()
    assert ds.preview is None


def test_the_upload_limits_are_within_what_the_trainer_reads(settings):
    assert TRAINER_LIMITS.max_row_bytes >= settings.DATASET_MAX_ROW_BYTES
    assert TRAINER_LIMITS.max_row_depth >= settings.DATASET_MAX_ROW_DEPTH
    assert TRAINER_LIMITS.max_row_values >= settings.DATASET_MAX_ROW_VALUES
    assert TRAINER_LIMITS.max_rows >= settings.DATASET_MAX_ROWS
    assert TRAINER_LIMITS.max_decoded_bytes >= settings.DATASET_MAX_DECODED_BYTES


def test_a_parquet_upload_of_more_text_once_decoded_than_the_limit_is_refused(
    data_root, owner, settings, tmp_path
):
    # 800 bytes that decode to 20 GB were accepted: a value repeated through a
    # dictionary, each row within the row limit.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    settings.DATASET_MAX_DECODED_BYTES = 1 << 20
    text = pa.array(["r" * 50_000] * 1000).dictionary_encode()
    pq.write_table(
        pa.table({"prompt": text, "answer": ["a"] * 1000}), tmp_path / "d.pq"
    )
    data = (tmp_path / "d.pq").read_bytes()
    assert len(data) < 20_000
    response = client_for(owner).post(
        "/datasets/", {"file": SimpleUploadedFile("d.parquet", data)}
    )
    assert response.status_code == 400
    assert (
        "file: rows 1 to 21 hold more once decoded than the limit of 1 MB "
        "(DATASET_MAX_DECODED_BYTES)"
    ) in _errors(response)
    assert stored(owner) == []
