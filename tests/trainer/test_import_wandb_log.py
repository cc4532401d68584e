"""The pieces of the W&B importer that need no ``wandb``: the transaction log's
framing (records split across 32 KiB blocks, a file still being written, corruption),
the tables' shapes, and the error without wandb."""

from __future__ import annotations

import math
import sys

import pytest
from fake_dashboard import TOKEN
from wandb_frames import framed

from trainer.cli import main
from trainer.importers import wandb_tables
from trainer.importers.wandb_log import BLOCK, BadWandbFile, RecordLog


def test_records_split_across_blocks_come_out_whole_and_in_order(tmp_path):
    # 3 bytes left in block 0 (a zero trailer), exactly 7 left in block 1 (an empty
    # FIRST chunk), a record over three blocks, an empty record.
    records = [b"a" * (BLOCK - 17), b"b" * (BLOCK - 14), b"c" * 5]
    records += [bytes(range(256)) * 300, b"", b"end"]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(framed(records))
    assert RecordLog(path).read() == records


def test_a_file_still_being_written_is_read_up_to_its_last_whole_record(tmp_path):
    records = [b"first", b"x" * 40_000, b"third"]
    data = framed(records)
    path = tmp_path / "run-x.wandb"
    log = RecordLog(path)
    got: list[bytes] = []
    cuts = [0, 5, 7, 12, 19, 20, 26, BLOCK - 1, BLOCK, BLOCK + 3, len(data) - 1]
    for cut in [*cuts, len(data)]:
        path.write_bytes(data[:cut])  # what a writer had flushed by then
        got += log.read()
        assert got == records[: len(got)]
    assert got == records
    assert log.read() == [] and log.offset == len(data)


def test_a_corrupt_chunk_names_the_file_and_offset(tmp_path):
    data = bytearray(framed([b"one", b"two"]))
    data[7 + 7 + 3 + 7] ^= 0xFF  # a byte of the second record's data
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    with pytest.raises(BadWandbFile, match=r"run-x.wandb: offset 17: checksum"):
        RecordLog(path).read()


def test_a_file_that_is_not_a_transaction_log_is_refused(tmp_path):
    path = tmp_path / "run-x.wandb"
    path.write_bytes(b"PK\x03\x04 not a log")
    with pytest.raises(BadWandbFile, match="not a W&B transaction log"):
        RecordLog(path).read()


def test_verl_validation_generations_are_trajectories_once_per_step():
    table = {
        "columns": ["step", "input_1", "output_1", "score_1", "input_2", "output_2"]
        + ["score_2"],
        "data": [
            [5, "2+2?", "4", 1.0, "2+2?", "5", 0.0],
            [10, "3+3?", "6", 1.0, "9-1?", "8", None],
        ],
    }
    assert wandb_tables.is_cumulative(table)
    found = wandb_tables.samples(table, step=99)
    assert [(s.step, s.prompt, s.completion) for s in found] == [
        (5, "2+2?", "4"),
        (5, "2+2?", "5"),
        (10, "3+3?", "6"),
        (10, "9-1?", "8"),
    ]
    assert math.isnan(found[3].reward)
    groups_at: dict[int, int] = {10: 2}  # step 10 has two groups already
    events = wandb_tables.trajectories(found, groups_at)
    places = [(e["step"], e["group"], e["index"]) for e in events]
    assert places == [(5, 0, 0), (5, 0, 1), (10, 2, 0), (10, 3, 0)]
    adv = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO within the group {1, 0}
    assert events[0]["advantage"] == pytest.approx(adv)
    assert events[2]["advantage"] == 0.0  # alone in its group
    assert events[0]["facts"] == {"split": "validation"}
    assert groups_at == {5: 1, 10: 4}


def test_a_trl_table_of_chat_prompts_and_text_extras():
    table = {
        "columns": ["step", "prompt", "completion", "acc", "judge_note", "advantage"],
        "data": [
            [2, [{"role": "user", "content": "hi"}], "hello", None, "ok", "x"],
            [2, [{"role": "user", "content": "hi"}], "hey", 1.0, "fine", 0.5],
        ],
    }
    assert not wandb_tables.is_cumulative(table)
    first, second = wandb_tables.samples(table, step=0, weights=[2.0])
    assert first.prompt == "user: hi" and first.components == {}
    assert math.isnan(first.reward) and first.advantage is None
    assert first.facts == {"judge_note": "ok"}
    assert second.reward == 2.0 and second.advantage == 0.5


def test_a_trl_tables_log_extra_numbers_are_facts_when_the_history_names_rewards():
    table = {
        "columns": ["step", "prompt", "completion", "acc", "n_calls", "advantage"],
        "data": [[2, "q", "a", 1.0, 4, 0.5], [2, "q", "b", float("nan"), 6, -0.5]],
    }
    first, second = wandb_tables.samples(table, step=0, logged={"acc"})
    assert first.components == {"acc": 1.0} and first.facts == {"n_calls": 4}
    assert math.isnan(second.reward)  # no reward function scored it (TRL: NaN)


def test_other_tables_are_not_trajectories():
    assert wandb_tables.samples({"columns": ["a"], "data": [[1]]}, step=1) == []


def test_without_wandb_the_import_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run-1-abc"
    run_dir.mkdir()
    (run_dir / "run-abc.wandb").write_bytes(framed([]))
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails
    monkeypatch.setitem(sys.modules, "wandb.proto", None)
    args = ["import", "--from", "wandb", str(run_dir), "--report-to", "http://x"]
    assert main(args) == 2
    assert "pip install -r requirements-wandb.txt" in capsys.readouterr().err


def test_a_directory_without_wandb_runs_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    args = ["import", "--from", "wandb", str(tmp_path), "--report-to", "http://x"]
    assert main(args) == 2
    assert "no W&B run directories" in capsys.readouterr().err
