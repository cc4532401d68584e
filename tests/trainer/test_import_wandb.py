"""``python -m trainer import --from wandb``: runs the real ``wandb`` package wrote in
offline mode (``wandb_writer.py``, a TRL-style GRPO run), imported into the fake
dashboard: metrics (W&B's names and ours), config, summary, the completions table as
trajectories, each run once, and ``--follow`` while the writer is still writing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_dashboard import TOKEN, FakeDashboard

from trainer.cli import main

pytest.importorskip(
    "wandb.proto.wandb_internal_pb2",
    reason="needs the wandb package: pip install -r requirements-wandb.txt",
)

WRITER = Path(__file__).with_name("wandb_writer.py")


def write_run(wandb_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(wandb_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(proc: subprocess.Popen, limit: float = 180) -> None:
    out, _ = proc.communicate(timeout=limit)
    assert proc.returncode == 0, out.decode()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """One finished W&B run of 20 steps, as ``<dir>/wandb/offline-run-*``."""
    where = tmp_path_factory.mktemp("wandb")
    finish(write_run(where))
    return where / "wandb"


@pytest.fixture
def wandb_dir(written, tmp_path) -> Path:
    """A copy of the written run that a test may import (the state file lands in it)."""
    return Path(shutil.copytree(written, tmp_path / "wandb", symlinks=True))


@pytest.fixture
def dash(monkeypatch):
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    server = FakeDashboard().start()
    yield server
    server.stop()


def wait_until(predicate, what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


def test_an_offline_run_imports_metrics_config_summary_and_completions(
    dash, wandb_dir, capsys
):
    args = ["import", "--from", "wandb", str(wandb_dir), "--report-to", dash.url]
    assert main(args) == 0
    run = dash.only_run()
    assert (run["name"], run["framework"], run["status"]) == (
        "trl-grpo",
        "wandb",
        "succeeded",
    )
    config = run["config"]
    assert config["learning_rate"] == 1e-5 and config["num_generations"] == 2
    assert config["source"] == "wandb" and "_wandb" not in config
    assert config["wandb"]["project"] == "wandb-import"
    assert config["wandb"]["summary"]["best_reward"] == pytest.approx(2.0)

    events = dash.events()
    assert events[0]["type"] == "run_started"
    steps = {e["step"]: e["metrics"] for e in of_type(events, "step")}
    assert sorted(steps) == list(range(1, 21))  # train/global_step, not W&B's _step
    m = steps[7]
    assert m["train/reward"] == m["reward"] == pytest.approx(0.7)
    assert m["train/kl"] == m["kl"] == pytest.approx(0.07)
    assert m["train/rewards/acc/mean"] == m["rewards/acc/mean"] == 0.5
    assert m["train/learning_rate"] == m["lr"] == 1e-5
    assert m["train/completions/mean_length"] == m["completions/mean_length"] == 12
    assert not any(k.startswith("_") for k in m)  # _step, _runtime, _timestamp
    assert steps[20]["best_reward"] == pytest.approx(2.0)  # only in the summary
    assert "best_reward" not in steps[19]

    trajs = of_type(events, "trajectory")
    assert len(trajs) == 80  # 20 steps x 2 prompts x 2 completions
    step3 = {(e["group"], e["index"]): e for e in trajs if e["step"] == 3}
    assert sorted(step3) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert step3[0, 0]["segments"][0]["text"] == "What is 3+1?"
    assert step3[1, 1]["segments"][0]["text"] == "What is 3*2?"
    assert [step3[0, i]["segments"][1]["text"] for i in (0, 1)] == ["4", "no idea"]
    assert step3[0, 0]["task_id"] == step3[0, 1]["task_id"] != step3[1, 0]["task_id"]
    assert step3[0, 0]["rewards"]["components"] == {"acc": 1.0, "fmt": 0.5}
    # reward_weights [1.0, 0.5] from the config: 1 * acc + 0.5 * fmt
    assert step3[0, 0]["reward"] == 1.25 and step3[0, 1]["reward"] == 0.25
    assert step3[0, 0]["advantage"] == pytest.approx(0.3)
    assert step3[0, 1]["advantage"] == pytest.approx(-0.3)
    assert of_type(events, "run_finished") == [
        {"type": "run_finished", "status": "succeeded", "step": 20, "error": None}
    ]
    assert "0 duplicates, 0 rejected" in capsys.readouterr().out


def test_a_second_import_of_the_same_directory_imports_nothing_twice(
    dash, wandb_dir, capsys
):
    args = ["import", "--from", "wandb", str(wandb_dir), "--report-to", dash.url]
    assert main(args) == 0
    sent = len(dash.store.requests)
    count = len(dash.events())
    capsys.readouterr()
    assert main(args) == 0
    assert "imported before as run" in capsys.readouterr().out
    assert len(dash.store.requests) == sent and len(dash.events()) == count
    # Without the state file, into the same run: the dashboard keeps each event once.
    run_id = dash.only_run()["id"]
    for state in wandb_dir.glob("*/.dashboard-import.json"):
        state.unlink()
    assert main([*args, "--run-id", str(run_id)]) == 2  # --run-id: one run dir only
    (run_dir,) = [p for p in wandb_dir.iterdir() if p.name.startswith("offline-run")]
    one = ["import", "--from", "wandb", str(run_dir), "--report-to", dash.url]
    assert main([*one, "--run-id", str(run_id)]) == 0
    assert f"{count} duplicates, 0 rejected" in capsys.readouterr().out
    assert len(dash.events()) == count and dash.store.reopened == [run_id]


def test_a_folder_of_many_runs_imports_each_as_its_own_run(dash, tmp_path, capsys):
    procs = [write_run(tmp_path, "--rows", "3"), write_run(tmp_path, "--rows", "2")]
    procs.append(write_run(tmp_path, "--rows", "1", "--exit-code", "3"))
    for proc in procs:
        finish(proc)
    state = tmp_path / "state.json"
    args = ["import", "--from", "wandb", str(tmp_path / "wandb"), "--report-to"]
    assert main([*args, dash.url, "--state", str(state)]) == 0
    runs = list(dash.store.runs.values())
    assert len(runs) == 3
    by_steps = {len(of_type(r["events"], "step")): r for r in runs}
    assert sorted(by_steps) == [1, 2, 3]
    assert by_steps[3]["status"] == by_steps[2]["status"] == "succeeded"
    assert by_steps[1]["status"] == "failed"
    assert of_type(by_steps[1]["events"], "run_finished")[0]["error"] == (
        "W&B exit code 3"
    )
    capsys.readouterr()
    assert main([*args, dash.url, "--state", str(state)]) == 0
    assert capsys.readouterr().out.count("skipped") == 3
    assert len(dash.store.runs) == 3


def test_follow_sees_the_rows_of_a_run_still_being_written(dash, tmp_path):
    writer = write_run(tmp_path, "--pause-at-block", "--rows", "5")
    try:
        wait_until(lambda: (tmp_path / "paused").exists(), "the writer's first block")
        before = int((tmp_path / "paused").read_text())
        args = ["import", "--from", "wandb", str(tmp_path / "wandb")]
        args += ["--report-to", dash.url, "--follow", "--poll-s", "0.1"]
        codes: list[int] = []
        follower = threading.Thread(
            target=lambda: codes.append(main([*args, "--idle-exit", "6"]))
        )
        follower.start()

        def steps():
            if not dash.store.runs:
                return []
            return [e["step"] for e in of_type(dash.events(), "step")]

        # The first block holds rows the writer logged before it paused: sent while
        # the writer is still running (its run has no exit record yet).
        wait_until(lambda: len(steps()) >= 2, "rows of the live run")
        assert writer.poll() is None and dash.only_run()["status"] == "running"
        assert max(steps()) < before
        (tmp_path / "go").write_text("")
        finish(writer)
        follower.join(timeout=120)
        assert codes == [0]
    finally:
        if writer.poll() is None:
            writer.kill()
    assert steps() == list(range(1, before + 6))
    run = dash.only_run()
    assert run["status"] == "succeeded"
    assert len(of_type(run["events"], "trajectory")) == 4 * (before + 5)
