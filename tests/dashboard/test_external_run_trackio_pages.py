"""What the pages say of a run trackio's client reported: its steps without a known
total, whether it is still sending (trackio has no finish call), its text-only
trajectories, and the alerts the trainer sent itself (``trackio.alert``)."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.models import Run, Trajectory
from dashboard.reads import runs as run_reads
from dashboard.site import tokens

pytestmark = pytest.mark.django_db

PROJECT, NAME = "walk1-trackio", "grpo-qwen-ext"


@pytest.fixture
def trackio(owner):
    """``trackio(name, args)``: one call of trackio's HTTP API as the owner."""
    token = tokens.do_create_token(owner, "trackio")[1]
    client = Client()

    def call(name, kwargs):
        answer = client.post(
            f"/trackio/api/{name}",
            json.dumps({"args": [], "kwargs": kwargs}),
            content_type="application/json",
            headers={"X-Trackio-Write-Token": token},
        )
        assert answer.json()["error"] is None, answer.json()
        return answer.json()["data"]

    return call


def entry(run_id, metrics, step):
    return {
        "project": PROJECT,
        "run": NAME,
        "run_id": run_id,
        "metrics": metrics,
        "step": step,
        "config": {"model": "Qwen/Qwen2.5-0.5B"},
        "log_id": uuid.uuid4().hex,
    }


@pytest.fixture
def reported(trackio):
    """The newcomer's run: 20 steps of metrics, a trackio Table and a Trace at step
    19, and one ``trackio.alert``."""
    run_id = uuid.uuid4().hex
    logs = [
        entry(run_id, {"train/reward": 0.1 * s, "train/loss": 1 / (s + 1)}, s)
        for s in range(20)
    ]
    table = {
        "_type": "trackio.table",
        "_value": [
            {"prompt": "2+2?", "completion": "4", "reward": 1.0},
            {"prompt": "2+2?", "completion": "5", "reward": 0.0},
        ],
    }
    trace = {
        "_type": "trackio.trace",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ],
        "metadata": {"reward": 0.5},
        "spans": [],
    }
    logs.append(entry(run_id, {"samples": table, "rollout": trace}, 19))
    trackio("bulk_log", {"logs": logs})
    alert = {
        "project": PROJECT,
        "run": NAME,
        "run_id": run_id,
        "title": "reward plateau",
        "text": "reward flat for 10 steps",
        "level": "warn",
        "step": 19,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "alert_id": uuid.uuid4().hex,
    }
    trackio("bulk_alert", {"alerts": [alert]})
    return Run.objects.get(external_id=run_id)


def went_quiet(run, *, sent_for_s=3, ago_s=222):
    """The run's client sent for ``sent_for_s`` seconds and stopped ``ago_s`` ago."""
    last = timezone.now() - timedelta(seconds=ago_s)
    Run.objects.filter(pk=run.pk).update(
        started_at=last - timedelta(seconds=sent_for_s), heartbeat_at=last
    )
    run.refresh_from_db()
    return run


# --- steps ----------------------------------------------------------------------------
def test_compare_shows_the_steps_of_a_run_with_no_known_total_alone(
    reported, owner, owner_client
):
    ours = Run.objects.create(
        owner=owner, name="ours", config={"steps": 5}, status="succeeded", last_step=5
    )
    html = owner_client.get(f"/compare/?runs={reported.pk},{ours.pk}").content
    assert b'<td class="num">19</td>' in html
    assert b"19/0" not in html and b'<td class="num">5/5</td>' in html


# --- live or not ----------------------------------------------------------------------
def test_a_trackio_run_that_stopped_sending_is_not_received_live_anywhere(
    reported, owner_client
):
    run = went_quiet(reported)
    assert run.status == "running"  # ended by EXTERNAL_RUN_TIMEOUT, not by a page
    assert not run_reads.receiving(run)
    home = owner_client.get("/")
    assert home.context["live"] is None and home.context["upcoming"] is None
    assert b"Receiving now" not in home.content and b"Watch it live" not in home.content
    page = owner_client.get(f"/runs/{run.pk}/")
    html = page.content.decode()
    assert "data-live-text" not in html and "data-quiet" in html
    assert "last event 3\xa0minutes ago" in html
    # The wall time ends at its last event: 3 s, not the 3m 42s since it started.
    assert page.context["stats"].duration_s == pytest.approx(3, abs=0.01)
    assert not page.context["page_data"]["receiving"]
    other = Run.objects.create(owner=run.owner, name="o", config={}, status="failed")
    compare = owner_client.get(f"/compare/?runs={run.pk},{other.pk}")
    (row, _) = compare.context["summary"]
    assert row["stats"].duration_s == pytest.approx(3, abs=0.01)


def test_a_trackio_run_sending_now_is_received_live(reported, owner_client):
    assert run_reads.receiving(reported)
    home = owner_client.get("/")
    assert home.context["live"] == reported
    assert b"Receiving now: grpo-qwen-ext" in home.content
    html = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    assert "data-live-text" in html and "data-quiet" not in html


def test_a_lost_runs_wall_time_ends_at_its_last_event_too(reported):
    run = went_quiet(reported, sent_for_s=10, ago_s=3600)
    Run.objects.filter(pk=run.pk).update(status="lost")
    run.refresh_from_db()
    assert run_reads.duration_s(run) == pytest.approx(10, abs=0.01)


# --- trajectories without token data --------------------------------------------------
def test_text_only_trajectories_say_no_token_data_rather_than_length_0(
    reported, owner_client
):
    assert Trajectory.objects.filter(run=reported).count() == 3
    html = owner_client.get(f"/runs/{reported.pk}/trajectories/?step=19").content
    assert html.count(b"data-no-token-data") == 3
    assert b"<dt>length</dt><dd>0</dd>" not in html
    detail = owner_client.get(f"/runs/{reported.pk}/trajectories/19/0/0/")
    assert detail.context["token_data"] is False
    assert b"data-no-token-data>no token data" in detail.content
    assert b"0 tokens" not in detail.content
    run_page = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    assert "no token data sent (text only)" in run_page
    assert "token arrays on" not in run_page


def test_a_trajectory_with_a_counted_length_shows_it(reported, owner_client):
    Trajectory.objects.filter(run=reported, group=0, index=1).update(length=12)
    html = owner_client.get(f"/runs/{reported.pk}/trajectories/?step=19").content
    assert html.count(b"data-no-token-data") == 2
    assert b"<dt>length</dt><dd>12</dd>" in html
    detail = owner_client.get(f"/runs/{reported.pk}/trajectories/19/0/1/")
    assert detail.context["token_data"] is True
    assert b"12 tokens" in detail.content
    run_page = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    assert "token arrays on" in run_page


# --- alerts the trainer sent ----------------------------------------------------------
def test_an_alert_the_trainer_sent_shows_its_words_not_a_detectors_evidence(
    reported, owner_client
):
    page = owner_client.get(f"/runs/{reported.pk}/")
    html = page.content.decode()
    assert "Evidence and repair" not in html
    assert "What the detector compared" not in html
    assert "No reward weight removes this pattern" not in html
    (sent,) = page.context["sent_alerts"]
    assert page.context["detector_alerts"] == []
    assert sent["sent"] == {"title": "reward plateau", "level": "warning"}
    assert 'data-sent-alert="reward plateau"' in html
    assert "reward flat for 10 steps" in html and "step 19" in html
    # The detectors' list stays empty: "None so far" is shown.
    assert "data-no-alerts>" in html
    home = owner_client.get("/").content.decode()
    assert "data-sent-alert>reward plateau<" in home and "(sent by the trainer)" in home
