"""An external run's page left open while its client sends: "Sent: N metrics" counts a
metric key that arrives later without a reload (it stayed at the count of the
render), and a run whose events all came in one batch shows no wall time ("—",
with a tooltip saying why) instead of "0s", until it sends again."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RECORDING = "document.querySelector('[data-recording]')?.innerText.trim()"
WALL = "document.querySelector('[data-stat=duration]')"


def trackio_logger(page, ui, base: str, project: str):
    """``log(name, steps, metrics)``: one ``bulk_log`` of those steps as trackio's
    client sends it; returns the run's id."""
    send = ui.trackio_sender(page, base, project)
    return lambda name, steps, metrics: send(name, steps, metrics=metrics)


def test_sent_counts_a_metric_key_that_arrives_later(live, page, shots, ui):
    log = trackio_logger(page, ui, live.url, "sent-live")
    run = log("grows keys", [0], {"train/reward": 0.1, "train/loss": 1.0})
    page.goto(f"{live.url}/runs/{run}/")
    assert page.evaluate(RECORDING) == "Sent: 2 metrics, no trajectories."
    ui.until(page, "document.body.dataset.live === 'live'")
    log("grows keys", [1], {"train/reward": 0.2, "train/loss": 0.5, "train/kl": 0.01})
    ui.until(page, f"{RECORDING} === 'Sent: 3 metrics, no trajectories.'", 15)
    ui.shot(page, shots, "sent_live_3_metrics", full=False)
    page.reload()  # the server says the same
    assert page.evaluate(RECORDING) == "Sent: 3 metrics, no trajectories."
    page.guard.check()


def test_a_run_that_had_sent_nothing_gets_its_sent_line(live, page, ui):
    """Created over the events API with no event yet, its page has no line at all:
    the first metrics bring it."""
    token = ui.new_token(page, live.url)
    http = httpx.Client(
        base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    r = http.post("/api/runs/external", json={"name": "nothing yet <i>x</i>"})
    assert r.status_code == 201, r.text
    run = r.json()["id"]
    page.goto(f"{live.url}/runs/{run}/")
    assert page.evaluate(RECORDING) is None
    ui.until(page, "document.body.dataset.live === 'live'")
    step = {"type": "step", "step": 1, "metrics": {"reward": 0.5, "entropy": 1.0}}
    r = http.post(f"/api/runs/{run}/events", content=json.dumps(step) + "\n")
    assert r.status_code == 200, r.text
    ui.until(page, f"{RECORDING} === 'Sent: 2 metrics, no trajectories.'", 15)
    # In its place under the run's facts, as a reload renders it.
    assert page.evaluate(
        "document.querySelector('.page-head > div > .meta + [data-recording]') !== null"
    )
    page.guard.check()


def test_a_run_sent_in_one_batch_shows_no_wall_time_until_it_sends_again(
    live, page, shots, ui
):
    log = trackio_logger(page, ui, live.url, "one-batch-live")
    run = log("one batch", list(range(5)), {"train/reward": 0.3})
    page.goto(f"{live.url}/runs/{run}/")
    data = json.loads(page.text_content("#page-data"))
    assert data["clock"]["duration_s"] < 1  # the precondition: one batch
    ui.until(page, "document.body.dataset.live === 'live'")
    page.wait_for_timeout(2500)  # the page's clock has ticked (every second)
    assert page.evaluate(f"{WALL}.textContent") == "—"
    title = page.evaluate(f"{WALL}.querySelector('[data-one-batch]')?.title")
    assert title and "one batch" in title and "how long it trained" in title
    ui.shot(page, shots, "one_batch_wall_time", full=False)
    # It sends again 2.5 s later: the time between its first and last event shows.
    log("one batch", [5], {"train/reward": 0.4})
    ui.until(page, f"/^\\d+s$/.test({WALL}.textContent)", 15)
    assert int(page.evaluate(f"{WALL}.textContent")[:-1]) >= 2
    assert page.evaluate(f"{WALL}.querySelector('[data-one-batch]')") is None
    page.guard.check()
