"""``python -m trainer``: presets, runs, and bad configs that exit 2 naming every field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.cli import load_config_file, main
from trainer.config import ENV_NAMES

ROOT = Path(__file__).resolve().parents[2]


def test_it_lists_every_registered_preset_with_the_fields_it_sets(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("ppo", "grpo", "dr_grpo", "dapo", "cispo", "gspo"):
        assert f"\n{name}" in "\n" + out
    assert "seq_mean_token_sum_norm" in out and "cispo" in out
    assert "overlong_shaping" in out and "value_clip" in out


def test_it_prints_every_bad_field_and_exits_2(tmp_path, capsys):
    bad = {
        "rollout": {"group_size": 1, "temperature": -1},
        "algorithm": {"preset": "sac"},
        "optim": {"lr": 0},
        "surprise": True,
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    for field in (
        "rollout.group_size",
        "rollout.temperature",
        "algorithm.preset",
        "optim.lr",
        "surprise",
    ):
        assert field in err, field


def test_it_names_a_missing_file_and_a_file_that_is_not_a_mapping(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    listy = tmp_path / "list.json"
    listy.write_text("[1, 2]")
    assert main(["run", str(listy)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "mapping" in err


def test_it_trains_writes_events_and_resumes_from_its_output_dir(tmp_path):
    cfg = {
        "steps": 2,
        "env": {"name": "calc"},
        "model": {"warmstart_steps": 1},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        "checkpoint": {"every": 1},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "trainer", "run", str(path), "--out", str(out)]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "step     1" in first.stdout and "succeeded after step 2" in first.stdout
    events = [
        json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
    ]
    assert {e["type"] for e in events} >= {
        "run_started",
        "step",
        "trajectory",
        "checkpoint",
    }
    # Same --out with more steps: it resumes after the last checkpoint.
    again = subprocess.run(
        [*cmd, "--steps", "3"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert "step     3" in again.stdout and "step     1 " not in again.stdout


@pytest.mark.parametrize(
    "path", sorted((ROOT / "bench" / "configs").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_shipped_demo_config_is_valid(path):
    cfg = load_config_file(str(path))
    assert cfg.steps > 0 and cfg.env.name in ENV_NAMES


@pytest.mark.slow
def test_it_trains_with_two_processes_through_torchrun_and_resumes(tmp_path):
    cfg = {
        "steps": 2,
        "env": {"name": "calc"},
        "model": {"warmstart_steps": 1},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        "checkpoint": {"every": 1},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "trainer", "run", str(path), "--out", str(out)]
    two = [*cmd, "--nproc-per-node", "2"]
    first = subprocess.run(two, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    # Rank 0 alone prints and writes.
    assert first.stdout.count("succeeded after step 2") == 1
    assert (out / "checkpoints" / "step-000002" / "dcp").is_dir()
    again = subprocess.run(
        [*two, "--steps", "3"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    events = [
        json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
    ]
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3]
    keys = [
        (e["step"], e["group"], e["index"]) for e in events if e["type"] == "trajectory"
    ]
    assert len(keys) == len(set(keys)) == 3 * 2 * 2
    started = [e for e in events if e["type"] == "run_started"]
    assert [e["start_step"] for e in started] == [1, 3]
    assert started[0]["config"]["resources"] == {"processes": 2, "strategy": "ddp"}
    # The RNG streams are per rank: one process cannot continue a two-process run.
    one = subprocess.run(
        [*cmd, "--steps", "4"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert one.returncode == 1
    assert "resources.processes" in one.stderr and "written by 2" in one.stderr


def test_it_refuses_more_processes_than_tasks_naming_the_field(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"rollout": {"tasks_per_step": 2}}))
    assert main(["run", str(path), "--nproc-per-node", "3"]) == 2
    assert "resources.processes" in capsys.readouterr().err
