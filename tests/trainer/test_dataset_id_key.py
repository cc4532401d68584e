"""An ``id_key`` a row does not have is refused with the row and its fields, as a
missing prompt or answer key is: a misspelt one silently gave every row its line
number as id (the platform's form now says so beside the field before launch)."""

from __future__ import annotations

import json

import pytest

from trainer.envs.dataset_files import DatasetError, read_rows


def test_an_id_key_no_row_has_is_an_error_naming_the_row_and_its_fields(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"q": "1 + 1 ?", "a": "2", "uid": "x1"}, {"q": "2 + 2 ?", "a": "4"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError) as exc:
        read_rows(str(path), prompt_key="q", answer_key="a", id_key="id")
    assert str(exc.value) == "id_key: line 1 has no 'id' field (its fields: q, a, uid)"
    with pytest.raises(DatasetError, match="^id_key: line 2 has no 'uid' field"):
        read_rows(str(path), prompt_key="q", answer_key="a", id_key="uid")
    ids = [r.id for r in read_rows(str(path), prompt_key="q", answer_key="a")]
    assert ids == ["jsonl-1", "jsonl-2"]  # no id_key: the line number
