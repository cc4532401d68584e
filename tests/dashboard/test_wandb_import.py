"""A W&B run imported into the real dashboard (Django's live server, the HTTP ingest,
the one write path): the run, its metrics (W&B's names and ours) and its trajectories
stored like any external run's, and a re-send stored once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dashboard.models import MetricPoint, Run, Trajectory
from dashboard.site import tokens
from trainer.cli import main

pytest.importorskip(
    "wandb.proto.wandb_internal_pb2",
    reason="needs the wandb package: pip install -r requirements-wandb.txt",
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WRITER = Path(__file__).resolve().parents[1] / "trainer" / "wandb_writer.py"


def test_an_imported_wandb_run_is_stored_like_any_external_run(
    owner, live_server, settings, tmp_path, monkeypatch, capsys
):
    settings.ALLOWED_HOSTS = ["*"]
    done = subprocess.run(
        [sys.executable, str(WRITER), str(tmp_path)],
        capture_output=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    monkeypatch.setenv("DASHBOARD_TOKEN", tokens.do_create_token(owner, "w")[1])
    args = ["import", "--from", "wandb", str(tmp_path / "wandb")]
    args += ["--report-to", live_server.url, "--spool", str(tmp_path / "spool")]
    assert main(args) == 0

    run = Run.objects.get()
    assert (run.owner, run.external, run.framework) == (owner, True, "wandb")
    assert (run.name, run.status, run.last_step) == ("trl-grpo", "succeeded", 20)
    assert run.config["wandb"]["project"] == "wandb-import"
    points = MetricPoint.objects.filter(run=run)
    for key in ("train/reward", "reward", "rewards/acc/mean", "kl", "lr"):
        assert points.filter(key=key).count() == 20, key
    assert points.get(key="reward", step=4).value == pytest.approx(0.4)
    assert points.get(key="best_reward", step=20).value == pytest.approx(2.0)
    trajs = Trajectory.objects.filter(run=run)
    assert trajs.count() == 80
    assert set(trajs.filter(step=5).values_list("group", "index")) == {
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    }
    best = trajs.get(step=5, group=0, index=0)
    assert (best.reward, best.advantage) == (1.25, pytest.approx(0.5))
    assert best.task_id == trajs.get(step=5, group=0, index=1).task_id

    # The state file forgotten, the same run sent again: the dashboard keeps it once.
    for state in (tmp_path / "wandb").glob("*/.dashboard-import.json"):
        state.unlink()
    (run_dir,) = [p for p in (tmp_path / "wandb").glob("offline-run-*")]
    capsys.readouterr()
    again = ["import", "--from", "wandb", str(run_dir), "--run-id", str(run.pk)]
    again += ["--report-to", live_server.url, "--spool", str(tmp_path / "spool2")]
    assert main(again) == 0
    # Every step and trajectory a duplicate; run_started and run_finished store no row.
    assert "2 events accepted, 100 duplicates, 0 rejected" in capsys.readouterr().out
    assert Run.objects.get().status == "succeeded"
    assert MetricPoint.objects.filter(run=run).count() == points.count()
    assert Trajectory.objects.filter(run=run).count() == 80
