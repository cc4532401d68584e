"""``python -m trainer run --report-to``: the run streamed to a (fake) dashboard."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_dashboard import TOKEN, FakeDashboard

from trainer.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "name": "tiny-report",
    "steps": 2,
    "env": {"name": "calc"},
    "model": {"warmstart_steps": 1},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    "checkpoint": {"every": 1},
}


@pytest.fixture
def dash():
    server = FakeDashboard().start()
    yield server
    server.stop()


def test_report_to_without_a_token_exits_2_naming_the_variable(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(TINY))
    assert main(["run", str(path), "--report-to", "http://127.0.0.1:9"]) == 2
    assert "DASHBOARD_TOKEN" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_streams_every_event_of_its_events_jsonl_and_resumes_into_the_same_run(
    dash, tmp_path
):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(TINY))
    out = tmp_path / "out"
    env = {**os.environ, "DASHBOARD_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "trainer", "run", str(path), "--out", str(out)]
    cmd += ["--report-to", dash.url]
    dash.fail(503, times=2)  # the dashboard is down when the run starts
    first = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr
    saved = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert dash.events() == saved
    assert {"run_started", "step", "trajectory", "run_finished"} <= {
        e["type"] for e in saved
    }
    run = dash.only_run()
    assert run["name"] == "tiny-report" and run["framework"] == "agentic-rl"
    assert run["config"]["rollout"]["group_size"] == 2
    remembered = json.loads((out / "dashboard_run.json").read_text())
    assert remembered == {"url": dash.url, "run_id": run["id"]}
    assert not list((out / "spool").glob("spool-*"))

    again = subprocess.run(
        [*cmd, "--steps", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert dash.only_run()["id"] == run["id"]  # no second run
    steps = [e["step"] for e in dash.events() if e["type"] == "step"]
    assert 3 in steps and steps.count(1) == 1


def test_a_rerun_into_an_out_without_a_checkpoint_is_refused_never_spliced(
    dash, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**TINY, "checkpoint": {"every": 0}}))
    out = tmp_path / "out"
    cmd = ["run", str(path), "--out", str(out), "--report-to", dash.url]
    assert main(cmd) == 0
    first = dash.only_run()
    sent = dash.events()
    written = (out / "events.jsonl").read_text()
    # Killed before its first checkpoint: nothing to resume from.
    shutil.rmtree(out / "checkpoints")
    capsys.readouterr()

    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert f"--out {out} holds an earlier run" in err and "--overwrite" in err
    assert dash.only_run()["id"] == first["id"] and dash.events() == sent
    assert dash.store.reopened == [] and first["status"] == "succeeded"
    assert (out / "events.jsonl").read_text() == written
    # A checkpoint there but --no-resume: the same refusal.
    assert main(["run", str(path), "--out", str(tmp_path / "b")]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--no-resume"]) == 2

    # --overwrite starts afresh: a new dashboard run, the old one untouched.
    assert main([*cmd, "--overwrite"]) == 0
    assert len(dash.store.runs) == 2 and dash.store.reopened == []
    assert dash.store.events(first["id"]) == sent
    remembered = json.loads((out / "dashboard_run.json").read_text())["run_id"]
    assert remembered != first["id"]
    fresh = dash.store.events(remembered)
    assert [e["step"] for e in fresh if e["type"] == "step"].count(1) == 1
    saved = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert saved == fresh
