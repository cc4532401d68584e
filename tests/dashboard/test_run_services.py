from __future__ import annotations

import pytest
from django.http import Http404

from dashboard.models import Run, RunStatus
from dashboard.runs import services

pytestmark = pytest.mark.django_db


def test_launch_creates_a_queued_run_and_enqueues_it_after_commit(
    owner, tiny_config, enqueued, commit
):
    with commit():
        run = services.launch_run(owner, tiny_config)
        assert enqueued == []
    assert run.status == RunStatus.QUEUED and run.owner == owner and run.name == "tiny"
    assert run.config["rollout"]["group_size"] == 2
    assert (
        run.config["algorithm"]["preset"] == "grpo"
    )  # stored fully validated, defaults filled
    assert enqueued == [(str(run.id), "cpu")]


def test_launch_does_not_enqueue_when_the_transaction_rolls_back(
    owner, tiny_config, enqueued, commit
):
    from django.db import transaction

    with commit(), pytest.raises(RuntimeError), transaction.atomic():
        services.launch_run(owner, tiny_config)
        raise RuntimeError("rollback")
    assert enqueued == [] and Run.objects.count() == 0


def test_launch_rejects_a_bad_config_naming_the_field(owner, tiny_config, enqueued):
    tiny_config["rollout"]["group_size"] = 1
    with pytest.raises(services.InvalidConfig) as exc:
        services.launch_run(owner, tiny_config)
    assert any(e.startswith("config.rollout.group_size:") for e in exc.value.errors)
    assert Run.objects.count() == 0 and enqueued == []


def test_a_run_on_more_processes_than_the_largest_worker_is_refused_at_submit(
    owner, tiny_config, enqueued, settings
):
    settings.RUN_MAX_PROCESSES = 2
    tiny_config["rollout"]["tasks_per_step"] = 4
    tiny_config["resources"] = {"processes": 4}
    with pytest.raises(services.InvalidConfig) as exc:
        services.launch_run(owner, tiny_config)
    [error] = exc.value.errors
    assert error.startswith("config.resources.processes: 4 processes asked")
    assert "at most 2" in error and "--nproc-per-node" in error
    assert Run.objects.count() == 0 and enqueued == []
    tiny_config["resources"] = {"processes": 2}  # what a worker has is queued for it
    assert services.launch_run(owner, tiny_config).queue == "cpu-x2"


def test_launch_rejects_unknown_keys_and_deep_nesting(owner, tiny_config, enqueued):
    with pytest.raises(services.InvalidConfig, match="config.bogus"):
        services.launch_run(owner, {**tiny_config, "bogus": 1})
    deep: dict = {}
    node = deep
    for _ in range(40):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(services.InvalidConfig, match="nested too deeply"):
        services.launch_run(
            owner, {**tiny_config, "env": {"name": "calc", "params": deep}}
        )
    assert enqueued == []


def test_launch_enforces_the_per_user_limit(owner, other, tiny_config, settings):
    settings.RUN_MAX_ACTIVE_PER_USER = 2
    services.launch_run(owner, tiny_config)
    services.launch_run(owner, tiny_config)
    with pytest.raises(services.Conflict, match="limit 2"):
        services.launch_run(owner, tiny_config)
    services.launch_run(other, tiny_config)  # the limit is per user
    assert Run.objects.count() == 3


def test_external_runs_do_not_count_toward_the_active_runs_limit(
    owner, tiny_config, settings
):
    from dashboard.runs import external

    settings.RUN_MAX_ACTIVE_PER_USER = 4
    for i in range(4):
        external.do_create_external_run(owner, name=f"elsewhere {i}")
    services.launch_run(owner, tiny_config)  # 4 running external runs: no 409
    assert Run.objects.filter(owner=owner, external=False).count() == 1


def test_demo_runs_do_not_count_toward_the_active_runs_limit(
    owner, tiny_config, settings
):
    """The embedded mode's demo runs belong to the user who logs in and pause
    for their runs: they must not use up that user's launches."""
    settings.RUN_MAX_ACTIVE_PER_USER = 2
    for status in (RunStatus.RUNNING, RunStatus.QUEUED):
        Run.objects.create(owner=owner, name="demo", config={}, demo=True,
                           status=status)  # fmt: skip
    services.launch_run(owner, tiny_config)
    services.launch_run(owner, tiny_config)  # two demos and one run: no 409
    with pytest.raises(services.Conflict, match="limit 2"):
        services.launch_run(owner, tiny_config)


def test_queue_follows_the_device(owner, tiny_config, settings, enqueued):
    settings.RUN_EXECUTOR = "celery"  # the workers' queues route the runs
    settings.RUN_QUEUE_AUTO = "gpu"
    a = services.launch_run(owner, {**tiny_config, "model": {"device": "cuda"}})
    b = services.launch_run(owner, {**tiny_config, "model": {"device": "auto"}})
    c = services.launch_run(owner, {**tiny_config, "model": {"device": "cpu"}})
    assert [a.queue, b.queue, c.queue] == ["gpu", "gpu", "cpu"]


@pytest.mark.parametrize(("cuda", "queue"), [(0, "cpu"), (1, "gpu")])
def test_embedded_auto_runs_queue_as_the_device_they_train_on(
    owner, tiny_config, settings, enqueued, monkeypatch, cuda, queue
):
    """The embedded server trains its runs itself (no queue routes them): an
    ``auto`` run on a machine without CUDA read queue "gpu" in the API."""
    from dashboard.runs import devices

    settings.RUN_EXECUTOR = "inprocess"
    settings.RUN_QUEUE_AUTO = "gpu"
    monkeypatch.setattr(devices, "cuda_usable", lambda: bool(cuda))
    run = services.launch_run(owner, {**tiny_config, "model": {"device": "auto"}})
    assert run.queue == queue


def test_cuda_that_torch_cannot_use_is_not_cuda(monkeypatch):
    """NVML may count a device the trainer will not train on (no usable driver):
    the run trains on the CPU, so its queue says cpu."""
    import torch

    from dashboard.runs import devices

    monkeypatch.setattr(devices, "cuda_devices", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.cuda_usable() is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.cuda_usable() is True


def test_clone_merges_overrides_and_records_the_parent(owner, tiny_config, enqueued):
    source = services.launch_run(owner, tiny_config)
    clone = services.clone_run(owner, source, {"optim": {"lr": 0.01}, "steps": 7})
    assert clone.parent == source
    assert clone.config["optim"]["lr"] == 0.01 and clone.config["steps"] == 7
    assert clone.config["rollout"] == source.config["rollout"]
    assert clone.name == "tiny (clone)"


def test_clone_validates_the_merged_config(owner, tiny_config, enqueued):
    source = services.launch_run(owner, tiny_config)
    with pytest.raises(services.InvalidConfig, match="config.optim.lr"):
        services.clone_run(owner, source, {"optim": {"lr": -1}})
    assert Run.objects.count() == 1


def test_cancel_of_a_queued_run_is_immediate(owner, tiny_config, published, commit):
    run = services.launch_run(owner, tiny_config)
    with commit():
        run = services.cancel_run(run)
    assert run.status == RunStatus.CANCELLED and run.cancel_requested
    assert published[-1]["status"] == "cancelled"


def test_cancel_of_a_running_run_only_sets_the_flag(
    owner, tiny_config, enqueued, published
):
    run = services.launch_run(owner, tiny_config)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    run = services.cancel_run(run)
    assert run.status == RunStatus.RUNNING and run.cancel_requested


def test_cancel_of_a_finished_run_is_a_conflict(owner, tiny_config, enqueued):
    run = services.launch_run(owner, tiny_config)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    with pytest.raises(services.Conflict, match="already succeeded"):
        services.cancel_run(run)


def test_owners_see_their_runs_staff_see_all_others_get_404(
    owner, other, staff, tiny_config, enqueued
):
    run = services.launch_run(owner, tiny_config)
    assert services.get_run_for_user(owner, run.id) == run
    assert services.get_run_for_user(staff, run.id) == run
    with pytest.raises(Http404):
        services.get_run_for_user(other, run.id)
    with pytest.raises(Http404):
        services.get_run_for_user(owner, "not-a-uuid")
    assert list(services.visible_runs(other)) == []


def test_a_broker_outage_at_launch_leaves_the_run_queued_for_the_reaper(
    owner, tiny_config, commit, settings, monkeypatch
):
    from datetime import timedelta

    from django.utils import timezone
    from kombu.exceptions import OperationalError

    from dashboard.runs import lease
    from dashboard.runs.jobs import execute_run

    settings.RUN_EXECUTOR = "celery"
    settings.RUN_SUBMIT = "dashboard.runs.jobs.submit"
    sent = []

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to redis")

    monkeypatch.setattr(execute_run, "apply_async", broker_down)
    with commit():
        run = services.launch_run(owner, tiny_config)  # no exception escapes
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED

    assert Run.objects.get(pk=run.pk).enqueued_at is None  # never reached the broker

    monkeypatch.setattr(
        execute_run, "apply_async", lambda args, queue: sent.append((args, queue))
    )
    with commit():
        assert lease.reap() == [run.id]  # the broker answers: sent at the next pass
    assert sent == [([str(run.id)], f"{settings.RUN_QUEUE_PREFIX}cpu")]
    assert Run.objects.get(pk=run.pk).enqueued_at is not None
    with commit():
        assert lease.reap() == []  # sent once, not at every pass
    later = timezone.now() + timedelta(seconds=settings.RUN_RESEND_QUEUED_SECONDS + 1)
    with commit():
        assert lease.reap(now=later) == [run.id]  # nobody claimed it: sent again
    assert len(sent) == 2


def test_a_named_clone_or_repair_carries_its_name_in_its_config(owner, tiny_config):
    source = services.launch_run(owner, {**tiny_config, "name": "mychat"})
    clone = services.do_clone_run(owner, source)
    assert clone.name == clone.config["name"] == "mychat (clone)"
    named = services.launch_run(owner, tiny_config, name="given")
    assert named.config["name"] == "given"
