"""A real TRL run (tiny model, CPU) with ``report_to="tensorboard"`` and
``log_completions=True``, imported afterwards with ``--from trl OUTPUT_DIR``: the
event files transformers' TensorBoardCallback wrote and TRL's completions parquet.

Needs ``trl`` (requirements-bench.txt) and ``tensorboard``
(requirements-importers.txt: only to write the event files; the importer reads them
itself)."""

from __future__ import annotations

import importlib.util

import pytest
from fake_dashboard import TOKEN, FakeDashboard
from test_trl_callback import grpo_trainer, train

from trainer.cli import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("trl") is None,
        reason="trl not installed (pip install -r requirements-bench.txt)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("tensorboard") is None,
        reason="tensorboard not installed (pip install -r requirements-importers.txt)",
    ),
]


def test_a_trl_run_reporting_to_tensorboard_imports_with_its_completions(
    tmp_path, monkeypatch
):
    out = tmp_path / "out"
    trainer = grpo_trainer(
        None, str(out), report_to="tensorboard", log_completions=True
    )
    train(trainer)
    assert list((out / "completions").glob("completions_*.parquet"))
    assert list(out.rglob("events.out.tfevents.*"))
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    dash = FakeDashboard().start()
    try:
        args = ["import", "--from", "trl", str(out), "--report-to", dash.url]
        assert main([*args, "--name", "trl-tb"]) == 0
        events, run = dash.events(), dash.only_run()
    finally:
        dash.stop()
    assert run["framework"] == "trl" and run["status"] == "succeeded"
    assert (
        run["config"]["num_generations"] == 2
    )  # TrainingArguments, from the args text
    steps: dict[int, dict] = {}
    for e in events:
        if e["type"] == "step":
            steps.setdefault(e["step"], {}).update(e["metrics"])
    assert sorted(steps) == [1, 2, 3]
    for metrics in steps.values():
        assert {"reward", "reward_std", "rewards/says_answer/mean"} <= metrics.keys()
        assert not any(k.startswith("train/") for k in metrics)
    trajs = [e for e in events if e["type"] == "trajectory"]
    assert sorted({e["step"] for e in trajs}) == [1, 2, 3]
    step1 = sorted(
        (e for e in trajs if e["step"] == 1), key=lambda e: (e["group"], e["index"])
    )
    assert [(e["group"], e["index"]) for e in step1] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for e in step1:
        parts = e["rewards"]["components"]
        assert set(parts) == {"says_answer", "is_short"}
        assert e["reward"] == pytest.approx(sum(parts.values()))
        assert "<bos>" in e["segments"][0]["text"]
    # The logged reward is the mean of the rows' totals (one generation batch a step).
    rewards = [e["reward"] for e in trajs if e["step"] == 1]
    assert steps[1]["reward"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
