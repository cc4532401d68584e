"""A real TRL ``GRPOTrainer`` (3 steps, tiny model, CPU) with ``report_to="trackio"``
and ``log_completions=True``, no callback: only ``TRACKIO_SERVER_URL`` points it at a
test server. Its metrics land at TRL's global steps under our names, its completions
as trajectories with a reward component per reward function, siblings by prompt.

Needs trackio and TRL in one interpreter (requirements-clients.txt and
requirements-bench.txt), else skipped with the reason."""

from __future__ import annotations

import subprocess

import pytest
from test_trackio_client import ROOT, client_python, run_client

from dashboard.models import MetricPoint, Run, Trajectory
from dashboard.site import tokens

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GRPO = """
import copy, json, random, tempfile, warnings
import torch
from datasets import Dataset
from transformers import PrinterCallback
from trl import GRPOConfig, GRPOTrainer
from trainer.config import ModelConfig
from trainer.envs.base import make_env
from trainer.policy import Policy
from trainer.tokenizer import EOA

def says_answer(completions, **kwargs):
    return [1.0 if "answer" in c.split() else 0.0 for c in completions]

def is_short(completions, **kwargs):
    return [1.0 if len(c.split()) < 4 else 0.0 for c in completions]

torch.manual_seed(0)
env = make_env("calc", seed=0)
policy = Policy.build(ModelConfig(size="tiny", device="cpu"), env.vocabulary())
model, tok = policy.model, copy.deepcopy(policy.tokenizer)
tok.eos_token = EOA
model.config.eos_token_id = model.generation_config.eos_token_id = policy.eoa_id
prompts = [f"{tok.bos_token} {t.prompt}" for t in env.sample_tasks(8, random.Random(1))]
args = GRPOConfig(
    output_dir=tempfile.mkdtemp(prefix="trl-trackio-"), per_device_train_batch_size=4,
    gradient_accumulation_steps=1, num_generations=2, max_completion_length=8, beta=0.0,
    learning_rate=1e-3, max_steps=3, logging_steps=1, activation_checkpointing=False,
    use_vllm=False, use_cpu=True, bf16=False, save_strategy="no", disable_tqdm=True,
    seed=0, report_to="trackio", log_completions=True, project="trl-tiny",
    run_name="grpo-3",
)
trainer = GRPOTrainer(model=model, reward_funcs=[says_answer, is_short], args=args,
                      train_dataset=Dataset.from_dict({"prompt": prompts}),
                      processing_class=tok)
trainer.remove_callback(PrinterCallback)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    trainer.train()
print(json.dumps({"steps": trainer.state.global_step}))
"""


@pytest.fixture
def trl_python():
    python = client_python()
    probe = subprocess.run([python, "-c", "import trl, datasets"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("trl not installed beside trackio (requirements-bench.txt)")
    return python


def test_a_grpo_trainer_reporting_to_trackio_lands_here(
    trl_python, live_server, owner, tmp_path, monkeypatch
):
    token = tokens.do_create_token(owner, "trl")[1]
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    url = f"{live_server.url}/trackio/?write_token={token}"
    out, _ = run_client(url, GRPO, tmp_path, timeout=600)
    assert out["steps"] == 3

    run = Run.objects.get(owner=owner, group="trl-tiny")
    assert (run.name, run.framework) == ("grpo-3", "trl")
    assert run.config["num_generations"] == 2 and run.last_step == 3
    reward = MetricPoint.objects.filter(run=run, key="reward")
    assert sorted(reward.values_list("step", flat=True)) == [1, 2, 3]
    assert MetricPoint.objects.filter(run=run, key="rewards/says_answer/mean").exists()
    assert not MetricPoint.objects.filter(run=run, key__startswith="train/").exists()

    trajs = Trajectory.objects.filter(run=run)
    assert sorted(set(trajs.values_list("step", flat=True))) == [1, 2, 3]
    step1 = list(trajs.filter(step=1).order_by("group", "index"))
    assert [(t.group, t.index) for t in step1] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for t in step1:
        assert set(t.rewards["components"]) == {"says_answer", "is_short"}
        assert t.reward == sum(t.rewards["components"].values())
    # Siblings share the prompt; their advantages are TRL's, centred per group.
    assert step1[0].task_id == step1[1].task_id != step1[2].task_id
    assert abs(step1[0].advantage + step1[1].advantage) < 1e-5


def test_a_weighted_grpo_run_adds_up_on_its_trajectory_page(
    trl_python, live_server, owner, tmp_path, monkeypatch
):
    # reward_weights=[1.0, 0.2]: the page said "reward 1.2" beside "step reward 2"
    # and a red cross; now each score counts as score x weight wherever summed.
    from dashtest import client_for

    token = tokens.do_create_token(owner, "trl-w")[1]
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    url = f"{live_server.url}/trackio/?write_token={token}"
    code = (
        GRPO.replace("says_answer", "accuracy_reward")
        .replace("is_short", "format_reward")
        .replace("len(c.split()) < 4", "len(c.split()) < 40")  # pays most rollouts
        .replace("seed=0, report_to", "seed=0, reward_weights=[1.0, 0.2], report_to")
    )
    out, _ = run_client(url, code, tmp_path, timeout=600)
    assert out["steps"] == 3

    run = Run.objects.get(owner=owner, group="trl-tiny")
    assert run.config["reward_weights"] == [1.0, 0.2]
    paid = [
        t
        for t in Trajectory.objects.filter(run=run)
        if t.rewards["components"].get("format_reward")
    ]
    assert paid  # rollouts the 0.2-weighted function paid
    c = client_for(owner)
    for t in paid[:4]:
        parts = t.rewards["components"]
        assert t.rewards["weights"] == {"accuracy_reward": 1.0, "format_reward": 0.2}
        assert t.reward == pytest.approx(
            parts["accuracy_reward"] + 0.2 * parts["format_reward"]
        )
        html = c.get(f"/runs/{run.pk}/trajectories/{t.step}/{t.group}/{t.index}/")
        html = html.content.decode()
        assert "check-bad" not in html and "do not add up" not in html
        assert f"data-step-total>{t.reward:.4g}<" in html
        assert "1 × 0.2" in html
    page = c.get(f"/runs/{run.pk}/").content.decode()
    assert "Reward components (unweighted scores)" in page
    assert "Reward components (weighted)" not in page
