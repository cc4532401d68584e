"""A real TRL ``GRPOTrainer`` (3 steps, tiny model, CPU) reporting through
``DashboardCallback`` to a fake dashboard. Needs ``trl`` (requirements-bench.txt)."""

from __future__ import annotations

import copy
import importlib.util
import random
import tempfile
import warnings

import pytest
import torch
from fake_dashboard import TOKEN, FakeDashboard

from trainer.config import ModelConfig
from trainer.envs.base import make_env
from trainer.policy import Policy
from trainer.spool import spool_files
from trainer.tokenizer import EOA

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("trl") is None,
        reason="trl not installed (pip install -r requirements-bench.txt)",
    ),
]


def says_answer(completions, **kwargs):
    return [1.0 if "answer" in c.split() else 0.0 for c in completions]


def is_short(completions, **kwargs):
    return [1.0 if len(c.split()) < 4 else 0.0 for c in completions]


def grpo_trainer(callback, output_dir, **overrides):
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    env = make_env("calc", seed=0)
    policy = Policy.build(ModelConfig(size="tiny", device="cpu"), env.vocabulary())
    model, tok = policy.model, copy.deepcopy(policy.tokenizer)
    tok.eos_token = EOA
    model.config.eos_token_id = model.generation_config.eos_token_id = policy.eoa_id
    prompts = [
        f"{tok.bos_token} {t.prompt}" for t in env.sample_tasks(8, random.Random(1))
    ]
    settings = dict(
        output_dir=output_dir,
        per_device_train_batch_size=4,  # 2 prompts x 2 completions per step
        gradient_accumulation_steps=1,
        num_generations=2,
        max_completion_length=8,
        beta=0.0,
        learning_rate=1e-3,
        max_steps=3,
        logging_steps=1,
        activation_checkpointing=False,
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    args = GRPOConfig(**{**settings, **overrides})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[says_answer, is_short],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
        callbacks=[callback] if callback is not None else [],
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def train(trainer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer.train()


def test_a_grpo_run_reports_metrics_and_completions_with_reward_columns():
    from trainer.integrations.trl import DashboardCallback

    dash = FakeDashboard().start()
    try:
        callback = DashboardCallback(dash.url, TOKEN, name="trl-tiny")
        train(grpo_trainer(callback, tempfile.mkdtemp(prefix="trl-cb-")))
        events = dash.events()
        run = dash.only_run()
    finally:
        dash.stop()
    assert run["name"] == "trl-tiny" and run["framework"] == "trl"
    assert run["status"] == "succeeded"
    assert run["config"]["num_generations"] == 2
    steps = {e["step"]: e["metrics"] for e in events if e["type"] == "step"}
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
        assert e["reward"] == sum(parts.values())
        prompt, action = e["segments"]
        assert prompt["kind"] == "prompt" and "<bos>" in prompt["text"]
        assert action["kind"] == "action" and action["token_ids"] == []
    # Siblings share the prompt; their advantages are TRL's, centred per group.
    assert step1[0]["segments"][0]["text"] == step1[1]["segments"][0]["text"]
    assert abs(step1[0]["advantage"] + step1[1]["advantage"]) < 1e-5


def test_training_finishes_and_keeps_the_events_when_the_dashboard_is_down(tmp_path):
    from trainer.integrations.trl import DashboardCallback

    dash = FakeDashboard().start()
    dash.stop()  # nothing listens on its port
    callback = DashboardCallback(
        dash.url, TOKEN, spool_dir=str(tmp_path / "spool"), close_timeout_s=0.5
    )
    trainer = grpo_trainer(callback, str(tmp_path / "out"))
    train(trainer)
    assert trainer.state.global_step == 3
    kept = [
        line
        for p in spool_files(tmp_path / "spool")
        for line in p.read_text().splitlines()
    ]
    assert sum('"type": "trajectory"' in line for line in kept) == 12
    assert '"type": "run_finished"' in kept[-1]
