"""Issue 21.4 and 7b at submit: a step that cannot fit, and a run no worker takes, are
400s naming the fields, and nothing is queued."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Run, Worker
from dashboard.runs import services, workers

pytestmark = pytest.mark.django_db

# Accepted by the schema before; took a worker to 5.9 GB in 128 s.
HUGE_ROLLOUT = {
    "tasks_per_step": 4096,
    "group_size": 256,
    "max_turns": 64,
    "max_action_tokens": 4096,
    "max_total_tokens": 131072,
}
GIB = 1 << 30


def post(client, body):
    return client.post("/api/runs", json.dumps(body), content_type="application/json")


def by_field(lines) -> dict[str, str]:
    """``field: message`` lines as {field: every message about it, joined}."""
    out: dict[str, str] = {}
    for line in lines:
        field, message = line.split(": ", 1)
        out[field] = f"{out[field]} | {message}" if field in out else message
    return out


def errors_of(response) -> dict[str, str]:
    return by_field(response.json()["errors"])


def announce(name="w1", queues=("gpu",), cuda=1, gpu=80 * GIB, ram=64 * GIB, age=0):
    workers.announce(workers.Offer(name, tuple(queues), cuda, max(cuda, 1), gpu, ram))
    if age:
        Worker.objects.filter(name=name).update(
            seen_at=timezone.now() - timedelta(seconds=age)
        )


def test_the_issues_config_is_refused_naming_the_fields_that_drive_it(
    owner_client, tiny_config, enqueued, commit
):
    with commit():
        r = post(owner_client, {"config": {**tiny_config, "rollout": HUGE_ROLLOUT}})
    assert r.status_code == 400, r.content
    errors = errors_of(r)
    for field in ("tasks_per_step", "group_size", "max_total_tokens"):
        message = errors[f"config.rollout.{field}"]
        assert "137,438,953,472 tokens" in message
        assert "4096 tasks x 256 rollouts x 131,072 tokens" in message
        assert "RUN_MAX_TOKENS_PER_STEP = 16,777,216" in message
    assert enqueued == [] and Run.objects.count() == 0


def test_the_tokens_limit_is_a_setting(owner, tiny_config, settings):
    # tiny_config: 2 tasks x 2 rollouts x min(2 turns x 12 tokens, 512) = 96 tokens
    settings.RUN_MAX_TOKENS_PER_STEP = 96
    services.launch_run(owner, tiny_config)
    settings.RUN_MAX_TOKENS_PER_STEP = 95
    with pytest.raises(services.InvalidConfig) as refused:
        services.launch_run(owner, tiny_config)
    assert "config.rollout.max_turns: a step of 96 tokens" in str(refused.value)
    assert "config.rollout.max_action_tokens" in str(refused.value)


def _refused(owner, config: dict) -> dict[str, str]:
    """The errors, by field, of launching ``config``, which must be refused."""
    with pytest.raises(services.InvalidConfig) as refused:
        services.launch_run(owner, config)
    return by_field(refused.value.errors)


def _one_turn(tiny_config: dict, size: str, *, action: int, total: int) -> dict:
    """16 tasks x 8 rollouts of one action of up to ``action`` tokens on the
    built-in model of ``size``, on the CPU."""
    return {
        **tiny_config,
        "model": {"size": size, "device": "cpu"},
        "rollout": {
            "tasks_per_step": 16,
            "group_size": 8,
            "max_turns": 1,
            "max_action_tokens": action,
            "max_total_tokens": total,
        },
    }


def test_a_step_over_the_memory_limit_is_refused_with_its_numbers(
    owner, tiny_config, settings
):
    settings.RUN_MAX_STEP_MEMORY_MB = 1024
    config = _one_turn(tiny_config, "0.5b", action=2048, total=4096)
    errors = _refused(owner, config)
    message = errors["config.model.size"]
    assert message.startswith("a step needs about ")
    assert "over RUN_MAX_STEP_MEMORY_MB: 1.0 GiB" in message
    assert "128 rollouts of up to 2,048 tokens" in message
    assert {"config.rollout.tasks_per_step", "config.rollout.group_size"} <= set(errors)
    assert Run.objects.count() == 0


def test_an_update_over_the_limit_names_micro_batches_which_make_it_fit(
    owner, tiny_config, settings
):
    settings.RUN_MAX_STEP_MEMORY_MB = 1024
    # 128 rollouts of up to 1,024 tokens on the small model: the update's one
    # minibatch needs ~6 GiB; in micro-batches of 4 rollouts, 0.2 GiB.
    config = _one_turn(tiny_config, "small", action=512, total=1024)
    errors = _refused(owner, config)
    assert "update 6.0 GiB for 128 rollouts" in errors["config.optim.micro_batch_size"]
    assert "config.optim.minibatches" in errors
    assert "config.optim.micro_batch_tokens" in errors  # a token budget does too
    config["optim"] = {"micro_batch_size": 4}
    services.launch_run(owner, config)
    assert Run.objects.count() == 1
    config["optim"] = {"micro_batch_tokens": 4 * 1024}
    services.launch_run(owner, config)
    assert Run.objects.count() == 2


def test_an_update_holding_every_logit_names_the_fused_head(
    owner, tiny_config, settings
):
    settings.RUN_MAX_STEP_MEMORY_MB = 1024
    config = _one_turn(tiny_config, "small", action=512, total=1024)
    assert "config.optim.fused_head" not in _refused(owner, config)  # on already
    config["optim"] = {"fused_head": False}
    errors = _refused(owner, config)
    assert errors["config.optim.fused_head"].startswith("a step needs about ")


def test_a_path_model_is_sized_from_its_config_json(
    owner, tiny_config, settings, tmp_path
):
    model = tmp_path / "models" / "llama-7b"
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        json.dumps(
            {
                "vocab_size": 32000,
                "hidden_size": 4096,
                "intermediate_size": 11008,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "tie_word_embeddings": False,
            }
        )
    )
    settings.MODEL_ROOTS = [tmp_path / "models"]
    settings.RUN_MAX_STEP_MEMORY_MB = 40 * 1024
    config = {**tiny_config, "model": {"path": str(model), "device": "cpu"}}
    errors = _refused(owner, config)
    # 6.74e9 parameters in float32: weights, gradients and two moments, 100 GiB
    assert "weights and optimizer 100.4 GiB" in errors["config.model.path"]


def test_the_memory_of_the_workers_that_would_take_it_is_the_limit(
    owner, tiny_config, settings
):
    settings.RUN_EXECUTOR = "celery"
    announce("small", queues=("gpu",), cuda=1, gpu=8 * GIB)
    config = {
        **tiny_config,
        "model": {"size": "0.5b", "device": "cuda"},
        "rollout": {
            "tasks_per_step": 4,
            "group_size": 4,
            "max_turns": 1,
            "max_action_tokens": 1024,
            "max_total_tokens": 1024,
        },
    }
    with pytest.raises(services.InvalidConfig) as refused:
        services.launch_run(owner, config)
    assert "over the GPU of the largest worker: 8.0 GiB" in str(refused.value)
    announce("big", queues=("gpu",), cuda=1, gpu=141 * GIB)
    services.launch_run(owner, config)


def test_a_device_no_live_worker_serves_is_refused_listing_what_is_served(
    owner_client, tiny_config, settings, enqueued, commit
):
    settings.RUN_EXECUTOR = "celery"
    settings.RUN_REFUSE_UNSERVED = True
    announce("gpu-box", queues=("gpu",), cuda=1)
    announce("dead", queues=("cpu",), cuda=0, age=3600)
    with commit():
        r = post(owner_client, {"config": tiny_config})  # model.device: cpu
    assert r.status_code == 400, r.content
    message = errors_of(r)["config.model.device"]
    assert "no live worker takes a run with model.device 'cpu' (queue cpu)" in message
    assert message.endswith("model.device served now: cuda, auto")
    with commit():
        ok = post(
            owner_client, {"config": {**tiny_config, "model": {"device": "cuda"}}}
        )
    assert ok.status_code == 201, ok.content
    assert [q for _, q in enqueued] == ["gpu"]


def test_cuda_needs_a_worker_with_a_gpu(owner, tiny_config, settings):
    settings.RUN_EXECUTOR = "celery"
    settings.RUN_REFUSE_UNSERVED = True
    announce("cpu-box-on-gpu-queue", queues=("gpu", "cpu"), cuda=0, gpu=None)
    config = {**tiny_config, "model": {"device": "cuda"}}
    with pytest.raises(services.InvalidConfig, match="queue gpu with CUDA"):
        services.launch_run(owner, config)
    services.launch_run(owner, {**tiny_config, "model": {"device": "auto"}})


def test_no_announcing_worker_refuses_every_run(owner, tiny_config, settings):
    settings.RUN_EXECUTOR = "celery"
    settings.RUN_REFUSE_UNSERVED = True
    with pytest.raises(services.InvalidConfig, match="none \\(no worker is announcing"):
        services.launch_run(owner, tiny_config)


def test_the_embedded_executor_serves_cuda_only_where_torch_sees_it(
    owner, tiny_config, settings
):
    import torch

    settings.RUN_EXECUTOR = "inprocess"
    settings.RUN_REFUSE_UNSERVED = True
    services.launch_run(owner, tiny_config)  # cpu
    services.launch_run(owner, {**tiny_config, "model": {"device": "auto"}})
    cuda = {**tiny_config, "model": {"device": "cuda"}}
    if torch.cuda.is_available():
        services.launch_run(owner, cuda)
    else:
        with pytest.raises(services.InvalidConfig, match="served now: cpu, auto"):
            services.launch_run(owner, cuda)


@pytest.mark.django_db(transaction=True)  # the announcer writes from its thread
def test_a_worker_announces_and_withdraws(settings):
    import threading

    offer = workers.local_offer("w@host", ["cpu", "gpu"])
    assert offer.queues == ("cpu", "gpu") and offer.ram_bytes
    stop = threading.Event()
    thread = workers.start_announcing(offer, stop)
    stop.set()
    thread.join(10)
    assert [o.name for o in workers.live_offers()] == ["w@host"]
    workers.forget("w@host")
    assert workers.live_offers() == []


def test_the_forms_live_check_shows_the_refusal_under_the_rollout_fields(
    owner_client,
):
    from dashboard.pages.forms import default_config, values_from_config
    from rewards.config import DETECTOR_NAMES

    values = values_from_config(default_config("calc", "grpo"))
    values.update({f"rollout.{k}": v for k, v in HUGE_ROLLOUT.items()})
    values["reward.detectors.enabled"] = list(DETECTOR_NAMES)
    data = {
        k: [str(x) for x in v]
        if isinstance(v, list)
        else ["on" if v is True else str(v)]
        for k, v in values.items()
        if v is not None and v is not False
    }
    res = owner_client.post("/runs/new/check/", data).json()
    assert res["ok"] is False
    for field in ("tasks_per_step", "group_size", "max_total_tokens"):
        assert "137,438,953,472 tokens" in " ".join(res["errors"][f"rollout.{field}"])


def test_the_forms_live_check_shows_the_steps_estimate(owner_client, tiny_config):
    from dashboard.pages.forms import default_config, values_from_config
    from rewards.config import DETECTOR_NAMES

    values = values_from_config(default_config("calc", "grpo"))
    values["reward.detectors.enabled"] = list(DETECTOR_NAMES)
    data = {
        k: [str(x) for x in v]
        if isinstance(v, list)
        else ["on" if v is True else str(v)]
        for k, v in values.items()
        if v is not None and v is not False
    }
    res = owner_client.post("/runs/new/check/", data).json()
    assert res["ok"] is True, res["errors"]
    r = {k: int(values[f"rollout.{k}"]) for k in HUGE_ROLLOUT}
    tokens = (
        r["tasks_per_step"]
        * r["group_size"]
        * min(r["max_turns"] * r["max_action_tokens"], r["max_total_tokens"])
    )
    assert res["estimate"].startswith(
        f"A step: {tokens:,} tokens (limit 16,777,216), about "
    )
    assert "per training process" in res["estimate"]


def test_a_rollout_over_the_limit_names_max_live_episodes_for_the_continuous_engine(
    owner, tiny_config, settings
):
    settings.RUN_MAX_STEP_MEMORY_MB = 1024
    # 128 rollouts of ~1,040 tokens on the small model, the update one rollout at a
    # time: the rollout's KV cache (~1.1 GiB) sets the peak.
    config = _one_turn(tiny_config, "small", action=1024, total=2048)
    config["optim"] = {"micro_batch_size": 1}
    assert "config.rollout.max_live_episodes" not in _refused(owner, config)  # eager
    config["rollout"]["engine"] = "continuous"
    errors = _refused(owner, config)
    assert ", generation 1." in errors["config.rollout.max_live_episodes"]
    config["rollout"]["max_live_episodes"] = 16  # 16 episodes' KV cache at once
    services.launch_run(owner, config)
    assert Run.objects.count() == 1
