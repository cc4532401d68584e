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
    assert 'data-sending="no"' in html and "data-live-text>not sending<" in html
    assert "last event <span data-last-event>3\xa0minutes</span> ago" in html
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
    assert 'data-sending="yes"' in html and "not sending" not in html


def test_the_run_page_gets_the_servers_threshold_to_notice_a_quiet_client_itself(
    reported, owner_client, settings
):
    """The open page switches to "not sending" on its own timer: it gets the
    seconds since the last event and the server's threshold (one constant, not a
    second copy in the script), and its check interval as a data attribute."""
    run = went_quiet(reported, sent_for_s=13, ago_s=30)
    page = owner_client.get(f"/runs/{run.pk}/")
    clock = page.context["page_data"]["clock"]
    assert clock["external"] is True
    assert clock["quiet_after_s"] == run_reads.quiet_window_s() == 120
    assert clock["event_age_s"] == pytest.approx(30, abs=2)
    assert clock["duration_s"] == pytest.approx(13, abs=0.01)
    html = page.content.decode()
    assert f'data-quiet-check-ms="{clock["quiet_check_ms"]}"' in html
    assert 'data-sending="yes"' in html and 'data-stat="duration">13s<' in html
    settings.EXTERNAL_RUN_TIMEOUT = 20  # a shorter timeout is the threshold then
    page = owner_client.get(f"/runs/{run.pk}/")
    assert page.context["page_data"]["clock"]["quiet_after_s"] == 20
    assert 'data-sending="no"' in page.content.decode()


def test_the_runs_list_and_home_say_not_sending_as_the_run_page_does(
    reported, owner, owner_client
):
    ours = Run.objects.create(
        owner=owner, name="ours", config={"steps": 5}, status="running"
    )
    run = went_quiet(reported, sent_for_s=20, ago_s=9 * 60)

    def row(html, pk):
        start = html.index(f'data-run-row="{pk}"')
        return html[start : html.index("</tr>", start)]

    listing = owner_client.get("/runs/").content.decode()
    assert "data-not-sending" in row(listing, run.pk)
    assert "not sending</div>" in row(listing, run.pk)
    assert "no events for 9m 00s" in row(listing, run.pk)
    assert "not sending" not in row(listing, ours.pk)
    home = owner_client.get("/")
    assert home.context["counts"]["running"] == 1  # ours, not the quiet one
    assert home.context["counts"]["not sending"] == 1
    html = home.content.decode()
    counts = html[html.index("data-run-counts") :][:1200]
    assert "data-not-sending" in counts and ">not sending</span> 1</span>" in counts
    assert "not sending</div>" in row(html, run.pk)
    # It sends again: running, and nothing says otherwise.
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())
    listing = owner_client.get("/runs/").content.decode()
    assert "not sending" not in row(listing, run.pk)
    assert owner_client.get("/").context["counts"]["running"] == 2


def test_compare_says_not_sending_as_the_runs_list_does(reported, owner, owner_client):
    ours = Run.objects.create(
        owner=owner, name="ours", config={"steps": 5}, status="running"
    )
    run = went_quiet(reported, sent_for_s=20, ago_s=9 * 60)
    html = owner_client.get(f"/compare/?runs={run.pk},{ours.pk}").content.decode()
    summary = html[html.index("data-summary") : html.index("</table>")]
    quiet, own = (summary[summary.index(f"/runs/{r.pk}/") :] for r in (run, ours))
    assert "data-not-sending" in quiet[: quiet.index("</tr>")]
    assert "data-not-sending" not in own[: own.index("</tr>")]


def test_the_home_banner_says_when_to_ask_again_about_a_receiving_run(
    reported, owner_client
):
    Run.objects.filter(pk=reported.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=100)
    )
    home = owner_client.get("/")
    assert home.context["live_quiet_in_s"] == pytest.approx(20, abs=2)
    html = home.content.decode()
    banner = html[html.index("data-live-banner") :][:300]
    assert 'data-quiet-in-s="' in banner and 'data-quiet-check-ms="1000"' in banner
    assert "js/home_live.js" in html


def test_the_wall_time_is_the_same_number_on_the_run_page_and_compare(
    reported, owner, owner_client
):
    run = went_quiet(reported, sent_for_s=3.6, ago_s=50)
    other = Run.objects.create(owner=owner, name="o", config={}, status="failed")
    page = owner_client.get(f"/runs/{run.pk}/")
    compare = owner_client.get(f"/compare/?runs={run.pk},{other.pk}")
    assert 'data-stat="duration">3s<' in page.content.decode()
    assert '<td class="num">3s</td>' in compare.content.decode()
    assert page.context["page_data"]["clock"]["duration_s"] == pytest.approx(3.6)


def test_a_lost_runs_wall_time_ends_at_its_last_event_too(reported):
    run = went_quiet(reported, sent_for_s=10, ago_s=3600)
    Run.objects.filter(pk=run.pk).update(status="lost")
    run.refresh_from_db()
    assert run_reads.duration_s(run) == pytest.approx(10, abs=0.01)


# --- what it sent, and how many alerts -------------------------------------------------
def test_a_run_that_sent_no_trajectories_says_what_it_sent_not_a_recording_policy(
    trackio, owner_client
):
    run_id = uuid.uuid4().hex
    trackio(
        "bulk_log",
        {"logs": [entry(run_id, {"train/reward": 0.5, "train/loss": 1.0}, 0)]},
    )
    run = Run.objects.get(external_id=run_id)
    html = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert "Recorded:" not in html and "rollouts a step" not in html
    assert "data-recording>Sent: 2 metrics, no trajectories.<" in html


def test_the_alerts_stat_is_counted_in_words_that_agree_with_it(reported, owner_client):
    html = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    assert 'data-stat="alerts">1<' in html
    assert 'data-stat-label="alerts">alert<' in html and "1 alerts" not in html
    Run.objects.filter(pk=reported.pk).update(
        pruned={"at": "2026-01-02T00:00:00", "arrays_dropped": 1}
    )
    html = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    assert "per-token arrays of 1 trajectory dropped" in html


# --- trajectories without token data --------------------------------------------------
def test_text_only_trajectories_say_no_token_data_rather_than_length_0(
    reported, owner_client
):
    assert Trajectory.objects.filter(run=reported).count() == 3
    html = owner_client.get(f"/runs/{reported.pk}/trajectories/?step=19").content
    assert html.count(b"data-no-token-data") == 3
    assert b'tokens the policy generated">generated</dt><dd>0</dd>' not in html
    detail = owner_client.get(f"/runs/{reported.pk}/trajectories/19/0/0/")
    assert detail.context["token_data"] is False
    assert b"data-no-token-data>no token data" in detail.content
    assert b"0 tokens" not in detail.content
    # nothing to colour: no colour controls, and the page says why
    assert b"data-colour-by" not in detail.content
    assert (
        b"data-text-only>Recorded as text: the trainer sent no tokens" in detail.content
    )
    run_page = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    assert "no token data sent (text only)" in run_page
    assert "token arrays on" not in run_page


def test_a_trajectory_with_a_counted_length_shows_it(reported, owner_client):
    Trajectory.objects.filter(run=reported, group=0, index=1).update(length=12)
    html = owner_client.get(f"/runs/{reported.pk}/trajectories/?step=19").content
    assert html.count(b"data-no-token-data") == 2
    assert b'tokens the policy generated">generated</dt><dd>12</dd>' in html
    detail = owner_client.get(f"/runs/{reported.pk}/trajectories/19/0/1/")
    assert detail.context["token_data"] is True
    # the header counts what the policy generated, the token view everything
    assert b"12 generated tokens" in detail.content
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


def test_a_rollouts_reward_reads_with_the_digits_of_its_components(
    reported, owner_client
):
    """A card read "0.06667" above "format 0.0667": both to 3 significant digits."""
    Trajectory.objects.filter(run=reported, group=0, index=1).update(reward=1 / 15)
    html = owner_client.get(f"/runs/{reported.pk}/trajectories/?step=19").content
    assert b'<div class="r">0.0667</div>' in html and b"0.06667" not in html


def test_home_watches_the_run_heard_from_last_not_the_newest(
    reported, owner, owner_client
):
    """A newcomer's home said "Receiving now" of an external run that had sent one
    batch a minute earlier (newest, and within the quiet threshold) while the demo
    trained: the banner is the run heard from last."""
    ours = Run.objects.create(
        owner=owner, name="demo", config={"steps": 200}, status="running",
        heartbeat_at=timezone.now(),
    )  # fmt: skip
    went_quiet(reported, sent_for_s=1, ago_s=60)
    Run.objects.filter(pk=reported.pk).update(created_at=timezone.now())  # newest
    assert owner_client.get("/").context["live"] == ours
    Run.objects.filter(pk=reported.pk).update(heartbeat_at=timezone.now())
    Run.objects.filter(pk=ours.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=5)
    )
    assert owner_client.get("/").context["live"].pk == reported.pk  # it sends now


def test_a_run_with_no_known_total_has_no_progress_bar(reported, owner_client):
    """A trackio run's steps have no total: its header said "step 19" beside a full
    progress bar, which reads as finished."""
    html = owner_client.get(f"/runs/{reported.pk}/").content.decode()
    head = html[: html.index("data-live-state")]
    assert "data-progress" not in head and "step <strong data-last-step>19" in head
