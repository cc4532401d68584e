"""A trackio run whose client stops, seen on pages left open: trackio has no finish
call, so the run page switches from "live" to "not sending" by itself once nothing
came for the server's threshold (given to the page, not a second constant), its wall
time stays at the last event (as compare says it), and the next event brings it back
to live, its reward drawn on the Reward chart as it arrives; the home page's
"Receiving now" banner drops the run the same way.

Time is not faked: the run's last event is set, through the ORM, to a few seconds
short of the threshold before a page opens, and the test waits for the page's own
timer (its interval is the page's ``data-quiet-check-ms``)."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = "browser-quiet"

# The run's client sent for ``sent_for`` seconds and its last event is ``left``
# seconds short of the threshold (the run's "created" set to it too); every other external run is long quiet (no banner
# of theirs). Prints the threshold.
GO_QUIET = """
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Run
from dashboard.reads.runs import quiet_window_s
now = timezone.now()
Run.objects.filter(external=True).update(heartbeat_at=now - timedelta(hours=1))
last = now - timedelta(seconds=quiet_window_s() - {left})
Run.objects.filter(pk={run_id!r}).update(
    heartbeat_at=last, started_at=last - timedelta(seconds={sent_for}), created_at=last
)
print(json.dumps(quiet_window_s()))
"""


def seconds(text: str) -> int:
    """The seconds of a wall time as the pages write it ("13s", "2m 14s")."""
    m = re.fullmatch(r"(?:(\d+)h )?(?:(\d+)m )?(?:(\d+)s)?", text.strip())
    assert m and text.strip(), text
    h, mins, s = (int(g or 0) for g in m.groups())
    return 3600 * h + 60 * mins + s


def not_sending(page) -> int:
    """The home page's count of runs not sending (0 when it shows none)."""
    m = re.search(r"not sending (\d+)", page.inner_text("[data-run-counts]"))
    return int(m[1]) if m else 0


@pytest.fixture
def trackio(scripted_live, page, ui):
    """Logged in as alice; ``trackio(name, step)`` sends one ``bulk_log`` of run
    ``name`` as trackio's client does and returns the run's id."""
    return ui.trackio_sender(page, scripted_live.url, PROJECT)


def test_an_open_run_page_notices_its_client_stopped_and_sending_again(
    scripted_live, trackio, page, shots, ui
):
    base = scripted_live.url
    for step in range(3):
        run = trackio("grpo-qwen-ext", step)
    other = trackio("another", 0)
    window = scripted_live.script(GO_QUIET.format(run_id=run, left=5, sent_for=13))
    assert window == 120  # the server's threshold, read by the page from its data

    page.goto(f"{base}/runs/{run}/")
    # Created with its last event (GO_QUIET): "1 minute" ago, turning 2 minutes on
    # the tick that says "not sending".
    assert page.inner_text("[data-created-ago]") == "1\xa0minute"
    ui.until(page, "document.body.dataset.live === 'live'", 30)
    state = page.locator("[data-live-state]")
    assert page.inner_text("[data-live-text]") == "live"
    assert state.get_attribute("data-sending") == "yes"
    assert page.inner_text("[data-stat=duration]") == "13s"
    check_ms = int(state.get_attribute("data-quiet-check-ms"))
    assert check_ms <= 1000
    # The Reward chart draws train/reward (not a generic "train/" chart).
    reward_points = (
        "Number(document.querySelector('[data-chart=reward]').dataset.points || 0)"
    )
    ui.until(page, f"{reward_points} === 3", 20)

    # Nothing more comes: "not sending" without a reload, the wall time held.
    ui.until(
        page,
        "document.querySelector('[data-live-text]').textContent === 'not sending'",
        5 + 3 * check_ms / 1000 + 5,
    )
    assert state.get_attribute("data-sending") == "no"
    assert "on" not in (page.get_attribute("[data-live-dot]", "class") or "")
    assert page.inner_text("[data-last-event]") == "2\xa0minutes"
    assert page.inner_text("[data-created-ago]") == "2\xa0minutes"  # not still 1
    page.wait_for_timeout(2 * check_ms + 200)
    assert page.inner_text("[data-stat=duration]") == "13s"  # not 2m 14s
    ui.shot(page, shots, "trackio_run_not_sending")

    # Compare says the same wall time: one function computes it.
    other_tab = page.context.new_page()
    other_tab.goto(f"{base}/compare/?runs={run},{other}")
    row = other_tab.locator("tr", has_text="grpo-qwen-ext").first.inner_text()
    assert re.search(r"(^|\s)13s(\s|$)", row), row
    other_tab.close()

    # It sends again: live, the wall time to the new event, the point on Reward.
    trackio("grpo-qwen-ext", 3)
    ui.until(
        page, "document.querySelector('[data-live-text]').textContent === 'live'", 10
    )
    assert state.get_attribute("data-sending") == "yes"
    ui.until(page, f"{reward_points} === 4", 10)
    live_wall = seconds(page.inner_text("[data-stat=duration]"))
    assert live_wall >= 13 + window - 5
    page.reload()
    assert abs(seconds(page.inner_text("[data-stat=duration]")) - live_wall) <= 1
    page.guard.check()


def test_the_home_banner_drops_a_run_that_stops_sending(
    scripted_live, trackio, page, shots, ui
):
    base = scripted_live.url
    run = trackio("banner-run", 0)
    scripted_live.script(GO_QUIET.format(run_id=run, left=4, sent_for=10))
    page.goto(base + "/")
    banner = page.locator("[data-live-banner]")
    assert "Receiving now: banner-run" in banner.inner_text()
    assert float(banner.get_attribute("data-quiet-in-s")) <= 4
    quiet_before = not_sending(page)  # the other tests' runs, made quiet above
    check_ms = int(banner.get_attribute("data-quiet-check-ms"))
    ui.until(
        page,
        "!document.querySelector('[data-live-banner]')",
        4 + 3 * check_ms / 1000 + 5,
    )
    assert not_sending(page) == quiet_before + 1
    assert "not sending" in page.inner_text(f"[data-run-row='{run}'] .col-status")
    ui.shot(page, shots, "home_banner_dropped")
    page.reload()
    assert page.locator("[data-live-banner]").count() == 0
    assert "not sending" in page.inner_text(f"[data-run-row='{run}']")
    page.guard.check()


def test_a_nan_reward_arriving_live_reads_as_the_server_writes_it(
    scripted_live, trackio, page, ui
):
    """The latest-reward box kept its last number when a NaN arrived live (the
    server wrote "NaN", marked, on a reload); the best reward counts numbers only."""
    base = scripted_live.url
    for step in range(3):
        run = trackio("nan-live", step)
    page.goto(f"{base}/runs/{run}/")
    ui.until(page, "document.body.dataset.live === 'live'", 30)
    assert page.inner_text("[data-stat=last_reward]") == "0.2"
    trackio("nan-live", 3, reward=float("nan"))
    ui.until(
        page,
        "document.querySelector('[data-stat=last_reward] [data-not-a-number]')"
        "?.textContent === 'NaN'",
        20,
    )
    title = page.get_attribute("[data-stat=last_reward] [data-not-a-number]", "title")
    assert title == "the last logged value is not a number"
    assert page.inner_text("[data-stat=best_reward]") == "0.2"
    trackio("nan-live", 4)  # a number again
    ui.until(
        page,
        "document.querySelector('[data-stat=last_reward]').textContent === '0.4'",
        20,
    )
    assert page.inner_text("[data-stat=best_reward]") == "0.4"
