"""A run keeps its model: the form's defaults end with a checkpoint, and the run's
model downloads (``GET /api/runs/<id>/model``) as a streamed tar of a directory that
transformers and peft load back, for its owner (and staff) only."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
import torch
from chatmodels import build_chat_model
from dashtest import client_for

from dashboard.models import Checkpoint, Run
from dashboard.pages.forms import default_config
from dashboard.runs import services
from dashboard.runs.jobs import execute_run
from dashboard.site.tokens import do_create_token

pytestmark = pytest.mark.django_db(transaction=True)

SMALL = {"tasks_per_step": 2, "group_size": 2, "max_turns": 2}
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture
def roots(tmp_path, settings):
    models, data = tmp_path / "models", tmp_path / "data"
    models.mkdir()
    data.mkdir()
    settings.MODEL_ROOTS, settings.DATA_ROOTS = [models], [data]
    settings.RUNS_DIR = tmp_path / "runs"
    return models, data


def form_config(**changes) -> dict:
    """The new-run form's defaults (what a browser submits untouched), made small."""
    cfg = default_config()
    cfg.update(steps=3, name="from the form")
    cfg["model"] = {**cfg["model"], "device": "cpu"}
    cfg["rollout"] = {**cfg["rollout"], **SMALL}
    cfg["model"]["warmstart_steps"] = 0
    cfg.update(changes)
    return cfg


def train(owner, cfg, enqueued) -> Run:
    run = services.launch_run(owner, cfg)
    assert execute_run.run(str(run.pk)) == "succeeded"
    run.refresh_from_db()
    return run


def body_of(response) -> bytes:
    """A streamed response's bytes (an asynchronous iterator, for ASGI)."""
    from asgiref.sync import async_to_sync

    async def read():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)()


def untar(response, dest) -> tuple[str, dict[str, bytes]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/x-tar"
    body = body_of(response)
    assert int(response["Content-Length"]) == len(body)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        names = tar.getnames()
        tar.extractall(dest, filter="data")
    top = {n.split("/")[0] for n in names}
    assert len(top) == 1, names
    return top.pop(), names


def test_a_run_from_the_forms_defaults_keeps_its_final_checkpoint(
    roots, owner, enqueued, tmp_path
):
    from transformers import AutoModelForCausalLM

    from trainer.checkpoint import load_weights
    from trainer.config import TrainConfig
    from trainer.envs.base import make_env
    from trainer.policy import Policy

    assert "checkpoint" not in {k for k, v in form_config().items() if v is None}
    run = train(owner, form_config(), enqueued)
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [
        3
    ]
    # The built-in model downloads as a save_pretrained directory (a small Llama and
    # the word-level tokenizer) that the trainer loads back as model.path.
    r = client_for(owner).get(f"/api/runs/{run.pk}/model")
    top, names = untar(r, tmp_path / "dl")
    assert top == "from-the-form-model-step-3" and r["X-Checkpoint-Step"] == "3"
    got = tmp_path / "dl" / top
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in got.iterdir()
    }
    cfg = TrainConfig.model_validate(run.config)
    env = make_env(cfg.env.name, cfg.env.params, seed=cfg.seed)
    trained = Policy.build(cfg.model, env.vocabulary())
    ckpt = tmp_path / "runs" / str(run.pk) / "checkpoints" / "step-000003"
    load_weights(ckpt, policy=trained)
    ids = torch.tensor([trained.encode(" ".join(env.vocabulary()[:12]))])
    want = trained.model(ids).logits
    loaded = AutoModelForCausalLM.from_pretrained(got).eval()
    assert torch.allclose(loaded(ids).logits, want, atol=1e-5)
    again = Policy.build(cfg.model.model_copy(update={"path": str(got)}), [])
    assert torch.allclose(again.model(ids).logits, want, atol=1e-5)
    fresh = Policy.build(cfg.model, env.vocabulary())  # the test can tell them apart
    assert not torch.allclose(fresh.model(ids).logits, want, atol=1e-3)


def test_a_lora_runs_adapter_and_merged_model_load_back_with_the_trained_logits(
    roots, owner, other, staff, enqueued, tmp_path
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.checkpoint import load_weights
    from trainer.config import TrainConfig
    from trainer.policy import Policy

    models, data = roots
    base = build_chat_model(models)
    rows = [{"prompt": f"what is {a} * 45 ?", "answer": str(a * 45)} for a in (7, 9)]
    (data / "mul.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = form_config(
        env={
            "name": "dataset",
            "params": {"path": str(data / "mul.jsonl"), "holdout": 0.0},
        },
        optim={"lr": 0.05},
    )
    cfg["model"] = {**cfg["model"], "path": str(base), "lora": LORA}
    cfg["rollout"]["max_action_tokens"] = 8
    # Untrained, every reward is 0: the entropy bonus alone moves the adapters.
    cfg["algorithm"] = {**cfg["algorithm"], "entropy_coef": 0.01}
    run = train(owner, cfg, enqueued)

    trained_cfg = TrainConfig.model_validate(run.config)
    trained = Policy.build(trained_cfg.model, [])
    ckpt = tmp_path / "runs" / str(run.pk) / "checkpoints" / "step-000003"
    load_weights(ckpt, policy=trained)
    tok = AutoTokenizer.from_pretrained(base)
    ids = torch.tensor([tok.encode("tom has 7 apples and gets 5 more")])
    with torch.no_grad():
        want = trained.model(ids).logits
        plain = AutoModelForCausalLM.from_pretrained(base).eval()
        assert not torch.allclose(plain(ids).logits, want, atol=1e-4)  # it learned

    owner_c = client_for(owner)
    top, _ = untar(owner_c.get(f"/api/runs/{run.pk}/model"), tmp_path / "merged")
    merged_dir = tmp_path / "merged" / top
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    assert not any("lora" in n for n, _ in merged.named_parameters())
    assert AutoTokenizer.from_pretrained(merged_dir).chat_template == tok.chat_template
    _, token = do_create_token(owner, "curl")  # what curl users do
    r = client_for(None).get(
        f"/api/runs/{run.pk}/model?kind=adapter",
        headers={"Authorization": f"Bearer {token}"},
    )
    top, names = untar(r, tmp_path / "adapter")
    adapter_dir = tmp_path / "adapter" / top
    assert f"{top}/adapter_model.safetensors" in names
    assert AutoTokenizer.from_pretrained(adapter_dir).chat_template == tok.chat_template
    # How the server loaded the tokenizer is not written into the download.
    for d in (merged_dir, adapter_dir):
        saved = json.loads((d / "tokenizer_config.json").read_text())
        assert "local_files_only" not in saved and "is_local" not in saved
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, want, atol=1e-4)
        fresh_base = AutoModelForCausalLM.from_pretrained(base)
        peft = PeftModel.from_pretrained(fresh_base, adapter_dir).eval()
        assert torch.allclose(peft(ids).logits, want, atol=1e-5)

    # Authorised like every read: another user's request is a 404, staff may.
    assert client_for(other).get(f"/api/runs/{run.pk}/model").status_code == 404
    assert client_for(None).get(f"/api/runs/{run.pk}/model").status_code == 401
    assert client_for(staff).get(f"/api/runs/{run.pk}/model").status_code == 200
    bad = owner_c.get(f"/api/runs/{run.pk}/model?kind=weights")
    assert bad.status_code == 400 and bad.json()["detail"].startswith("kind:")


def test_a_run_without_a_checkpoint_says_so_and_adapter_needs_lora(
    roots, owner, enqueued
):
    queued = services.launch_run(owner, form_config())
    r = client_for(owner).get(f"/api/runs/{queued.pk}/model")
    assert r.status_code == 404 and r.json()["detail"].startswith("model:")
    run = train(owner, form_config(steps=1), enqueued)
    r = client_for(owner).get(f"/api/runs/{run.pk}/model?kind=adapter")
    assert r.status_code == 400 and "no LoRA adapter" in r.json()["detail"]
