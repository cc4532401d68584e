"""Warm-start progress on the platform (issue 22, item 6): ``warmstart`` events are
taken by the events API and our worker's sink, keep an external run from ``lost``
(they are its heartbeat), and show on the run page and in its frames."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from dashtest import client_for
from django.conf import settings
from django.utils import timezone
from test_external_runs import TokenClient, new_run

from dashboard.ingest import writer
from dashboard.models import Run, RunStatus
from dashboard.runs import external
from dashboard.site import tokens

pytestmark = pytest.mark.django_db


def warm(done: int, of: int = 500, loss: float = 1.5) -> dict:
    return {"type": "warmstart", "done": done, "of": of, "loss": loss}


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "test")[1])


def test_the_event_schema_serves_the_warmstart_event(client):
    schema = client.get("/api/events/schema.json").json()
    assert "warmstart" in json.dumps(schema)


def test_warm_start_progress_keeps_an_external_run_from_lost(api, owner):
    run_id = new_run(api)
    timeout = settings.EXTERNAL_RUN_TIMEOUT
    # Silent for nearly the timeout while it warm-starts...
    long_ago = timezone.now() - timedelta(seconds=timeout - 5)
    Run.objects.filter(pk=run_id).update(heartbeat_at=long_ago)
    r = api.post_events(run_id, [warm(120)])
    assert r.status_code == 200, r.content
    # ...but its progress is a heartbeat: 10 s later it is not lost.
    assert external.mark_lost(now=timezone.now() + timedelta(seconds=10)) == []
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.RUNNING
    assert run.warmup == {"done": 120, "of": 500, "loss": 1.5}
    page = client_for(owner).get(f"/runs/{run_id}/").content.decode()
    assert "warm start: 120 of 500 steps" in page
    assert client_for(owner).get(f"/api/runs/{run_id}").json()["warmup"]["done"] == 120


def test_a_lost_run_warm_starting_comes_back(api):
    run_id = new_run(api)
    Run.objects.filter(pk=run_id).update(status=RunStatus.LOST)
    assert api.post_events(run_id, [warm(3)]).status_code == 200
    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_a_bad_warmstart_event_is_a_400_naming_the_field(api):
    run_id = new_run(api)
    r = api.post_events(run_id, [{"type": "warmstart", "done": "x", "of": 5}])
    assert r.status_code == 400 and "done" in r.content.decode()


def test_the_worker_sink_path_stores_and_frames_the_latest_progress(owner, tiny_config):
    run = Run.objects.create(
        owner=owner, name="r", config={**tiny_config, "model": {"warmstart_steps": 9}}
    )
    _, parts = writer.store(run.pk, [warm(3, 9), warm(6, 9, 0.75)])
    assert parts.warmup == {"done": 6, "of": 9, "loss": 0.75}
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    run.refresh_from_db()
    assert run.warmup == {"done": 6, "of": 9, "loss": 0.75}
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "warm start: 6 of 9 steps" in page and "data-run-state" in page


def test_a_running_run_before_its_first_report_says_the_warm_start_begins(
    owner, tiny_config
):
    run = Run.objects.create(
        owner=owner,
        name="r",
        config={**tiny_config, "model": {"warmstart_steps": 300}},
        status=RunStatus.RUNNING,
    )
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "warm start: starting (300 steps before step 1)" in page


@pytest.mark.parametrize("status", [RunStatus.CANCELLED, RunStatus.FAILED])
def test_a_run_that_ended_in_its_warm_start_says_where_on_its_empty_charts(
    owner, tiny_config, status
):
    """Not "No data yet." (none will come): it stopped at warm start N of M. A chart
    empty for a reason of its own keeps it."""
    run = Run.objects.create(
        owner=owner,
        name="r",
        config={**tiny_config, "model": {"warmstart_steps": 300}},
        status=status,
        warmup={"done": 120, "of": 300, "loss": 1.2},
    )
    page = client_for(owner).get(f"/runs/{run.pk}/")
    html = page.content.decode()
    stopped = (
        f"Stopped at warm start 120 of 300 ({status}): no RL step ran, so nothing "
        "was charted."
    )
    reward = html[html.index('data-chart="reward"') :]
    assert reward[: reward.index("</section>")].count(stopped) == 1
    assert "No data yet." not in html
    assert "No KL penalty in this run" in html  # tiny_config has no KL term
    # A run that ended after its first step, or before any warm start, is as before.
    Run.objects.filter(pk=run.pk).update(last_step=1)
    assert (
        "Stopped at warm start"
        not in client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    )


def test_a_one_step_warm_start_is_one_step(owner, tiny_config):
    run = Run.objects.create(
        owner=owner,
        name="r",
        config={**tiny_config, "model": {"warmstart_steps": 1}},
        status=RunStatus.RUNNING,
    )
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "warm start: starting (1 step before step 1)" in page


@pytest.mark.parametrize("status", [RunStatus.QUEUED, RunStatus.CANCELLED])
def test_the_runs_list_shows_the_warm_start_of_a_paused_or_stopped_run(
    owner, tiny_config, status
):
    """A paused demo kept warm start 103 of 300, and the list said "0/1500"."""
    Run.objects.create(
        owner=owner,
        name="demo",
        config={**tiny_config, "steps": 1500},
        status=status,
        warmup={"done": 103, "of": 300, "loss": 1.2},
    )
    client = client_for(owner)
    for page in ("/runs/", "/"):
        html = client.get(page).content.decode()
        assert "data-warmup>warm start 103/300</span>" in html, page
        assert "0/1500" not in html
