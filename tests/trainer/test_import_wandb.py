"""``python -m trainer import --from wandb``: runs the real ``wandb`` package wrote in
offline mode (``wandb_writer.py``, a TRL-style GRPO run), imported into the fake
dashboard: metrics (W&B's names and ours), config, summary, the completions table as
trajectories, each run once, and ``--follow`` while the writer is still writing."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_dashboard import wait_until

from trainer.cli import main

pytest.importorskip(
    "wandb.proto.wandb_internal_pb2",
    reason="needs the wandb package: pip install -r requirements-wandb.txt",
)

WRITER = Path(__file__).with_name("wandb_writer.py")
ADV = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO: (1 - 0.5) / (std of {1, 0} + eps)


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
    # 20 steps x 2 prompts x 2 completions: the last step's table, logged again by
    # TRL's log call at the end of training, is kept once
    assert len(trajs) == 80
    step3 = {(e["group"], e["index"]): e for e in trajs if e["step"] == 3}
    assert sorted(step3) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert step3[0, 0]["segments"][0]["text"] == "What is 3+1?"
    assert step3[1, 1]["segments"][0]["text"] == "What is 3*2?"
    assert [step3[0, i]["segments"][1]["text"] for i in (0, 1)] == ["4", "no idea"]
    assert step3[0, 0]["task_id"] == step3[0, 1]["task_id"] != step3[1, 0]["task_id"]
    assert step3[0, 0]["rewards"]["components"] == {"acc": 1.0, "fmt": 0.5}
    # reward_weights [1.0, 0.5] from the config: 1 * acc + 0.5 * fmt
    assert step3[0, 0]["reward"] == 1.25 and step3[0, 1]["reward"] == 0.25
    assert step3[0, 0]["rewards"]["weights"] == {"acc": 1.0, "fmt": 0.5}
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
        wait_until(
            lambda: (tmp_path / "paused").exists(), "the writer's first block", 120
        )
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
        wait_until(lambda: len(steps()) >= 2, "rows of the live run", 120)
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


def record(**fields):
    from wandb.proto import wandb_internal_pb2 as pb

    rec = pb.Record(**fields)
    return rec.SerializeToString()


def history(step, **values):
    from wandb.proto import wandb_internal_pb2 as pb

    items = []
    for key, value in values.items():
        path = key.split(":")  # a nested key, as wandb writes a logged table
        items.append(pb.HistoryItem(nested_key=path, value_json=json.dumps(value)))
    return record(history=pb.HistoryRecord(item=items, step=pb.HistoryStep(num=step)))


def test_a_log_of_verl_names_system_samples_and_cumulative_tables(dash, tmp_path):
    """A run as verl logs to W&B (its names, its validation table logged again with
    the rows before), built from wandb's own messages; system samples join the step
    being read; a summary-only number joins the last step."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb_frames import framed

    run_dir = tmp_path / "run-20260101_000000-v1"
    tables = run_dir / "files" / "media" / "table"
    tables.mkdir(parents=True)
    rows = [[1, "2+2?", "4", 1.0, "2+3?", "6", 0.0]]
    columns = ["step", "input_1", "output_1", "score_1", "input_2", "output_2"]
    columns.append("score_2")
    (tables / "a.table.json").write_text(json.dumps({"columns": columns, "data": rows}))
    rows.append([2, "9-1?", "8", 1.0, "9-1?", "7", 0.0])
    (tables / "b.table.json").write_text(json.dumps({"columns": columns, "data": rows}))

    def table(name):
        ref = {"_type": "table-file", "path": f"media/table/{name}.table.json"}
        return {f"val/generations:{k}": v for k, v in ref.items()}

    config = pb.ConfigRecord(update=[pb.ConfigItem(key="lr", value_json="0.001")])
    log = [
        record(run=pb.RunRecord(run_id="v1", display_name="verl-run", config=config)),
        record(metric=pb.MetricRecord(glob_name="*", step_metric="training/step")),
        record(
            stats=pb.StatsRecord(item=[pb.StatsItem(key="gpu.0.gpu", value_json="88")])
        ),
        history(0, **{"training/step": 1, "actor/entropy": 1.5, "_runtime": 3}),
        history(1, **{"training/step": 1, **table("a")}),
        history(2, **{"training/step": 2, "critic/score/mean": 0.5, **table("b")}),
        record(
            summary=pb.SummaryRecord(
                update=[pb.SummaryItem(key="acc", value_json="0.75")]
            )
        ),
        record(exit=pb.RunExitRecord(exit_code=0)),
    ]
    (run_dir / "run-v1.wandb").write_bytes(framed(log))
    args = ["import", "--from", "wandb", str(run_dir), "--report-to", dash.url]
    assert main(args) == 0

    run = dash.only_run()
    assert (run["name"], run["status"], run["config"]["lr"]) == (
        "verl-run",
        "succeeded",
        0.001,
    )
    steps = {e["step"]: e["metrics"] for e in of_type(run["events"], "step")}
    assert steps[1] == {
        "actor/entropy": 1.5,
        "entropy": 1.5,
        "training/step": 1.0,
        "system/gpu.0.gpu": 88.0,
        "system/gpu/0/util_percent": 88.0,
    }
    assert steps[2]["reward"] == 0.5 and steps[2]["acc"] == 0.75
    trajs = of_type(run["events"], "trajectory")
    places = [(e["step"], e["group"], e["index"], e["reward"]) for e in trajs]
    # step 1 once (table b repeats it); two prompts at step 1, one group at step 2
    assert places == [(1, 0, 0, 1.0), (1, 1, 0, 0.0), (2, 0, 0, 1.0), (2, 0, 1, 0.0)]
    assert trajs[2]["advantage"] == pytest.approx(ADV)
