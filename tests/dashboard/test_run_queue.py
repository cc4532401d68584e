"""A queued run says why it waits (issue 22, item 5): its place in line and what it
waits for, in the API and on the run page; on the embedded executor a demo run
yields to a user's own run."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from dashtest import client_for, wait_for
from django.utils import timezone

from dashboard.models import Run, RunAttempt, RunStatus, Worker
from dashboard.runs import inprocess, services

pytestmark = pytest.mark.django_db(transaction=True)

FUTURES: dict[str, Future] = {}


def recording_submit(run_id: str, queue: str = "") -> Future:
    """``RUN_SUBMIT``: the embedded executor's, keeping each run's future."""
    FUTURES[run_id] = inprocess.submit(run_id, queue)
    return FUTURES[run_id]


def _swarm_demo(owner, tiny_config, **fields) -> Run:
    run = Run.objects.create(
        owner=owner,
        name="swarm demo",
        config={**tiny_config, "steps": 1500},
        demo=True,
        **fields,
    )
    return run


def test_a_queued_run_names_its_place_and_the_run_it_waits_behind(
    owner, tiny_config, enqueued, settings
):
    settings.RUN_EXECUTOR = "inprocess"
    _swarm_demo(
        owner,
        tiny_config,
        status=RunStatus.RUNNING,
        last_step=412,
        started_at=timezone.now(),
    )
    mine = services.launch_run(owner, {**tiny_config, "name": "my first run"})
    later = services.launch_run(owner, {**tiny_config, "name": "my second run"})
    client = client_for(owner)

    body = client.get(f"/api/runs/{mine.pk}").json()
    assert body["waiting"]["position"] == 2
    assert body["waiting"]["workers"] is None
    assert body["waiting"]["text"] == (
        "next to start: 'swarm demo' trains now (step 412 of 1500), a demo that "
        "pauses for your run at its next step"
    )
    assert [a["name"] for a in body["waiting"]["ahead"]] == ["swarm demo"]
    second = client.get(f"/api/runs/{later.pk}").json()["waiting"]
    assert second["position"] == 3
    assert second["text"].startswith("2nd to start: 'swarm demo' trains now (step 412")
    assert second["text"].endswith("; 1 queued ahead")
    page = client.get(f"/runs/{mine.pk}/").content.decode()
    assert "next to start: &#x27;swarm demo&#x27; trains now (step 412 of 1500)" in page
    # The one run ahead is named once (the sentence), with a link to it; several
    # ahead are listed as links after it.
    assert "· ahead:" not in page and page.count("swarm demo</a>") == 0
    assert "open that run</a>" in page
    later_page = client.get(f"/runs/{later.pk}/").content.decode()
    assert "the 2 nearest ahead:" in later_page and "open that run" not in later_page
    listing = client.get("/runs/").content.decode()
    assert listing.count("trains now") == 2
    # A running run has no place in line.
    assert client.get(f"/api/runs/{mine.pk}").json()["demo"] is False
    Run.objects.filter(pk=mine.pk).update(status=RunStatus.RUNNING)
    assert client.get(f"/api/runs/{mine.pk}").json()["waiting"] is None


def test_a_users_run_goes_before_queued_demo_runs(
    owner, tiny_config, enqueued, settings
):
    settings.RUN_EXECUTOR = "inprocess"
    demo = _swarm_demo(owner, tiny_config)  # queued, submitted first
    mine = services.launch_run(owner, tiny_config)
    client = client_for(owner)
    assert client.get(f"/api/runs/{mine.pk}").json()["waiting"]["position"] == 1
    text = client.get(f"/api/runs/{demo.pk}").json()["waiting"]["text"]
    assert text.startswith("2nd in line, behind 'tiny' (queued)")


def test_a_paused_demo_says_where_it_paused_on_the_runs_list(
    owner, tiny_config, enqueued, settings
):
    """A demo that yielded to a user's run is queued again: the runs list read
    "queued" and "2nd in line", as if it had never run."""
    settings.RUN_EXECUTOR = "inprocess"
    note = "paused at step 12 for a user's run; resumes after it, from where it was"
    demo = _swarm_demo(
        owner, tiny_config, status=RunStatus.QUEUED, last_step=12, error=note
    )
    services.launch_run(owner, {**tiny_config, "name": "my run"})
    client = client_for(owner)
    listing = client.get("/runs/").content.decode()
    assert (
        "paused at step 12 for a user&#x27;s run, resumes from there; "
        "2nd in line, behind &#x27;my run&#x27; (queued)"
    ) in listing
    # The run page says it in its note; its place in line is said once.
    page = client.get(f"/runs/{demo.pk}/").content.decode()
    assert "resumes from there" not in page and "paused at step 12" in page
    # A user's own run with the same words in its note is not a paused demo.
    Run.objects.filter(pk=demo.pk).update(demo=False)
    assert "resumes from there" not in client.get("/runs/").content.decode()


def test_in_production_it_waits_for_a_worker_serving_its_queue(
    owner, tiny_config, enqueued, settings
):
    settings.RUN_EXECUTOR = "celery"
    mine = services.launch_run(owner, {**tiny_config, "model": {"device": "cpu"}})
    client = client_for(owner)
    waiting = client.get(f"/api/runs/{mine.pk}").json()["waiting"]
    assert waiting["workers"] == 0
    assert waiting["text"].startswith(
        "waiting for a worker serving queue cpu: none is running"
    )
    Worker.objects.create(name="w1", queues=["cpu"], devices=2, seen_at=timezone.now())
    waiting = client.get(f"/api/runs/{mine.pk}").json()["waiting"]
    assert waiting["workers"] == 1
    assert waiting["text"] == "next in line; waiting for a worker serving queue cpu"


def test_the_demo_pauses_for_a_users_run_and_resumes_after_it(
    owner, tiny_config, fake_runner, published, settings, monkeypatch
):
    settings.RUN_EXECUTOR = "inprocess"
    settings.RUN_SUBMIT = "test_run_queue.recording_submit"
    monkeypatch.setenv("FAKE_RUNNER_STEP_S", "0.05")
    demo_cfg = {**tiny_config, "name": "demo", "steps": 60, "checkpoint": {"every": 5}}
    demo = services.launch_run(owner, demo_cfg, demo=True)
    wait_for(
        lambda: Run.objects.get(pk=demo.pk).last_step >= 6, 120, message="demo steps"
    )
    mine = services.launch_run(owner, tiny_config)
    # Without the pause the user's run would wait for all 60 demo steps to finish.
    assert FUTURES[str(mine.pk)].result(timeout=300) == RunStatus.SUCCEEDED
    demo.refresh_from_db()
    assert demo.status in (RunStatus.QUEUED, RunStatus.RUNNING)
    assert demo.last_step < 60
    paused = RunAttempt.objects.get(run=demo, number=1)
    assert paused.outcome == "paused" and "for a user's run" in paused.message
    wait_for(
        lambda: Run.objects.get(pk=demo.pk).status == RunStatus.SUCCEEDED,
        300,
        message="the demo to resume and finish",
    )
    demo.refresh_from_db()
    assert demo.last_step == 60 and demo.attempt == 2


@pytest.mark.slow
def test_a_paused_demo_keeps_its_warm_start_and_steps_and_goes_on_from_them(
    owner, tiny_config, published, settings, tmp_path
):
    """The real trainer, in process: a demo paused in its warm start and again
    between steps (no scheduled checkpoint yet) goes on from where it stopped each
    time, not from nothing: the newcomer's demo lost its 300 warm-start steps and
    its RL steps to every run they launched."""
    from dashboard.models import Checkpoint, MetricPoint

    settings.RUN_EXECUTOR = "inprocess"
    settings.RUN_SUBMIT = "test_run_queue.recording_submit"
    settings.RUNS_DIR = tmp_path / "runs"
    demo_cfg = {
        **tiny_config,
        "name": "demo",
        "steps": 12,
        "model": {**tiny_config["model"], "warmstart_steps": 400, "warmstart_batch": 2},
        "checkpoint": {"every": 0},
    }
    demo = services.launch_run(owner, demo_cfg, demo=True)
    warm = settings.RUNS_DIR / str(demo.pk) / "checkpoints" / "warmstart.pt"

    def done() -> int:  # warm-start steps the page shows
        return int((Run.objects.get(pk=demo.pk).warmup or {}).get("done") or 0)

    wait_for(lambda: done() >= 1, 120, message="the demo's warm start")
    first = services.launch_run(owner, {**tiny_config, "name": "first"})
    assert FUTURES[str(first.pk)].result(timeout=300) == RunStatus.SUCCEEDED
    paused = RunAttempt.objects.get(run=demo, number=1)
    assert paused.outcome == "paused" and "in its warm start (" in paused.message
    assert warm.exists()
    wait_for(
        lambda: Run.objects.get(pk=demo.pk).last_step >= 2, 300, message="RL steps"
    )
    second = services.launch_run(owner, {**tiny_config, "name": "second"})
    assert FUTURES[str(second.pk)].result(timeout=300) == RunStatus.SUCCEEDED
    demo.refresh_from_db()
    stopped_at = RunAttempt.objects.get(run=demo, number=2)
    assert stopped_at.outcome == "paused"
    kept = Checkpoint.objects.filter(run=demo).values_list("step", flat=True)
    assert list(kept) == [demo.last_step] and demo.last_step >= 2
    wait_for(
        lambda: Run.objects.get(pk=demo.pk).status == RunStatus.SUCCEEDED,
        600,
        message="the demo to finish",
    )
    demo.refresh_from_db()
    assert demo.attempt == 3 and demo.error == ""
    steps = set(
        MetricPoint.objects.filter(run=demo, key="reward").values_list(
            "step", flat=True
        )
    )
    assert steps == set(range(1, 13))
