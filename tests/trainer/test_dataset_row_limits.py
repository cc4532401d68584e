"""One row of a dataset file is held to its limits before it is parsed (issue 21.3):
bytes per line or record, values and nesting per JSON row, rows per file. Each refusal
names the line and the limit; none needs the row in memory as Python objects."""

from __future__ import annotations

import io
import json
import random

import pytest

from trainer.envs.dataset_files import DatasetError, iter_records, read_rows
from trainer.envs.row_limits import (
    TRAINER_LIMITS,
    Lines,
    RowLimitError,
    RowLimits,
    check_json_shape,
    check_value_shape,
)

SMALL = RowLimits(max_row_bytes=1000, max_row_depth=4, max_row_values=20, max_rows=3)
GOOD = '{"prompt": "what is 2 + 2 ?", "answer": "4"}\n'


def _file(tmp_path, name: str, text: str | bytes):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


def _refusal(path: str, limits: RowLimits = SMALL, fmt: str = "jsonl") -> RowLimitError:
    with pytest.raises(RowLimitError) as info:
        list(iter_records(path, fmt=fmt, limits=limits))
    return info.value


def test_a_line_over_the_byte_limit_is_refused_having_read_one_byte_past_it():
    class Counting(io.BytesIO):
        taken = 0

        def readline(self, size=-1):
            line = super().readline(size)
            Counting.taken += len(line)
            return line

    fh = Counting((GOOD + '{"prompt": "' + "x" * 5000 + '"}\n').encode())
    lines = Lines(fh, SMALL)
    assert next(lines) == GOOD.encode()
    with pytest.raises(RowLimitError) as info:
        next(lines)
    assert str(info.value) == (
        "path: line 2 is longer than the limit of 1000 bytes (max_row_bytes)"
    )
    assert Counting.taken == len(GOOD) + 1001


def test_a_line_of_exactly_the_limit_passes_and_one_byte_more_does_not(tmp_path):
    row = '{"prompt": "p", "answer": "'
    fill = 1000 - len(row) - len('"}\n')
    at = _file(tmp_path, "at.jsonl", row + "a" * fill + '"}\n')
    assert [n for n, _ in iter_records(at, fmt="jsonl", limits=SMALL)] == [1]
    over = _file(tmp_path, "over.jsonl", row + "a" * (fill + 1) + '"}\n')
    assert _refusal(over).limit == "max_row_bytes"


def test_a_wide_row_of_empty_lists_is_refused_by_counting_its_values(tmp_path):
    line = '{"prompt": "p", "answer": "a", "pad": [' + "[]," * 30 + "[]]}\n"
    exc = _refusal(_file(tmp_path, "wide.jsonl", line))
    assert (exc.where, exc.limit) == ("line 1", "max_row_values")
    assert (
        str(exc)
        == "path: line 1 holds more than the limit of 20 values (max_row_values)"
    )


def test_a_deep_row_is_refused_before_the_parser_recurses(tmp_path):
    # 200 000 levels: json.loads raises RecursionError on this; the scan does not.
    deep = "[" * 200_000 + "]" * 200_000 + "\n"
    limits = RowLimits(max_row_bytes=1 << 20, max_row_depth=32, max_row_values=10**6)
    exc = _refusal(_file(tmp_path, "deep.jsonl", GOOD + deep), limits)
    assert (
        str(exc)
        == "path: line 2 nests deeper than the limit of 32 levels (max_row_depth)"
    )


def test_brackets_and_quotes_inside_strings_do_not_count():
    text = json.dumps({"prompt": '[[[[{{{{ \\" ]]]] ,,,,,,', "answer": '"[,]"'})
    check_json_shape(text.encode(), "line 1", SMALL)  # 3 values, depth 1


def test_the_value_count_and_depth_are_exact_for_json_that_parses():
    def values(v) -> int:
        kids = v.values() if isinstance(v, dict) else v if isinstance(v, list) else []
        return 1 + sum(values(k) for k in kids)

    def depth(v) -> int:
        if isinstance(v, dict | list):
            kids = v.values() if isinstance(v, dict) else v
            return 1 + max((depth(k) for k in kids), default=0)
        return 0

    def doc(rng: random.Random, level: int = 0):
        kind = rng.choice(["list", "dict", "str", "num"] if level < 5 else ["str"])
        n = rng.randint(0, 3)
        if kind == "list":
            return [doc(rng, level + 1) for _ in range(n)]
        if kind == "dict":
            return {f"k{i},[": doc(rng, level + 1) for i in range(n)}
        return rng.choice(["a,b", "[{", '"', 7, None, True]) if kind == "str" else 1.5

    rng = random.Random(0)
    for _ in range(300):
        value = doc(rng)
        raw = json.dumps(value, indent=rng.choice([None, 1])).replace("\n", " ")
        n, d = values(value), depth(value)
        exact = RowLimits(max_row_values=n, max_row_depth=max(d, 1))
        check_json_shape(raw.encode(), "line 1", exact)
        check_value_shape(value, "row 1", exact)
        with pytest.raises(RowLimitError, match="max_row_values"):
            check_json_shape(raw.encode(), "line 1", RowLimits(max_row_values=n - 1))
        with pytest.raises(RowLimitError, match="max_row_values"):
            check_value_shape(value, "row 1", RowLimits(max_row_values=n - 1))
        if d > 1:
            with pytest.raises(RowLimitError, match="max_row_depth"):
                check_json_shape(raw.encode(), "line 1", RowLimits(max_row_depth=d - 1))
            with pytest.raises(RowLimitError, match="max_row_depth"):
                check_value_shape(value, "row 1", RowLimits(max_row_depth=d - 1))


def test_rows_past_the_limit_are_refused_naming_the_first_one_over(tmp_path):
    path = _file(tmp_path, "rows.jsonl", GOOD * 2 + "\n" + GOOD * 2)
    exc = _refusal(path)
    assert str(exc) == "path: line 5 is past the limit of 3 rows (max_rows)"
    with pytest.raises(RowLimitError, match="line 2 is past the limit of 1 rows"):
        read_rows(path, max_rows=1)


def test_a_csv_record_spanning_lines_is_held_to_the_byte_limit_and_fields(tmp_path):
    quoted = '"' + "a line of text\n" * 80 + '"'
    path = _file(tmp_path, "long.csv", f"prompt,answer\n{quoted},4\n")
    exc = _refusal(path, fmt="csv")
    assert exc.limit == "max_row_bytes" and exc.where.startswith("line ")
    wide = "prompt,answer\nhi,4" + ",x" * 30 + "\n"
    exc = _refusal(_file(tmp_path, "wide.csv", wide), fmt="csv")
    assert (
        str(exc)
        == "path: line 2 holds more than the limit of 20 values (max_row_values)"
    )
    ok = _file(tmp_path, "ok.csv", 'prompt,answer\n"two\nlines",4\nthree,5\n')
    rows = read_rows(ok, limits=SMALL)
    assert [(r.line, r.prompt, r.answer) for r in rows] == [
        (3, "two\nlines", "4"),
        (4, "three", "5"),
    ]


def test_text_that_is_not_utf8_names_its_line(tmp_path):
    path = _file(tmp_path, "latin.jsonl", GOOD.encode() + b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"^path: line 2 is not UTF-8 text"):
        read_rows(path)


def test_parquet_rows_are_held_to_the_limits(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    many = pa.table({"prompt": ["p"] * 5, "answer": ["a"] * 5})
    pq.write_table(many, tmp_path / "many.parquet")
    exc = _refusal(str(tmp_path / "many.parquet"), fmt="parquet")
    assert str(exc) == "path: row 4 is past the limit of 3 rows (max_rows)"
    deep = pa.table({"prompt": ["p"], "answer": ["a"], "x": [[[[[[1]]]]]]})
    pq.write_table(deep, tmp_path / "deep.parquet")
    exc = _refusal(str(tmp_path / "deep.parquet"), fmt="parquet")
    assert (exc.where, exc.limit) == ("row 1", "max_row_depth")
    big = pa.table({"prompt": ["p" * 5000], "answer": ["a"]})
    pq.write_table(big, tmp_path / "big.parquet")
    exc = _refusal(str(tmp_path / "big.parquet"), fmt="parquet")
    assert (exc.where, exc.limit) == ("rows 1 to 1", "max_row_bytes")


def test_a_parquet_file_cannot_hide_a_row_or_its_total_behind_its_metadata(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    # One long prompt among 100 short rows: under the limit on average, which is
    # all a row group's metadata tells.
    prompts = ["p"] * 100
    prompts[37] = "q" * 5000
    lone = pa.table({"prompt": prompts, "answer": ["a"] * 100})
    pq.write_table(lone, tmp_path / "lone.parquet")
    limits = RowLimits(max_row_bytes=1000, max_rows=1000)
    exc = _refusal(str(tmp_path / "lone.parquet"), limits, fmt="parquet")
    assert (
        str(exc)
        == "path: row 38 is longer than the limit of 1000 bytes (max_row_bytes)"
    )
    # One 900-byte prompt repeated through a dictionary: each row within its limit,
    # the file a few KB, 900 KB of rows once decoded.
    text = pa.array(["r" * 900] * 1000).dictionary_encode()
    repeated = pa.table({"prompt": text, "answer": ["a"] * 1000})
    pq.write_table(repeated, tmp_path / "repeated.parquet", compression="zstd")
    assert (tmp_path / "repeated.parquet").stat().st_size < 10_000
    limits = RowLimits(max_row_bytes=1000, max_rows=1000, max_decoded_bytes=100_000)
    exc = _refusal(str(tmp_path / "repeated.parquet"), limits, fmt="parquet")
    assert (exc.where, exc.limit) == ("rows 1 to 109", "max_decoded_bytes")
    assert str(exc).endswith(
        "hold more once decoded than the limit of 100000 bytes (max_decoded_bytes)"
    )


def test_the_trainer_reads_with_its_own_ceilings_by_default(tmp_path):
    assert RowLimits() == TRAINER_LIMITS
    line = '{"prompt": "p", "answer": "a", "pad": [' + "[]," * 30 + "[]]}\n"
    assert len(read_rows(_file(tmp_path, "d.jsonl", line))) == 1
