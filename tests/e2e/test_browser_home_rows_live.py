"""Home and the runs list, left open while an external run sends events: the banner,
the counts and the run's row (progress, latest reward) follow it without a reload, a
run that starts meanwhile gets its row with the ticked compare boxes kept, and the
pages stop asking the server once no run on them is live.

The pages' interval (``data-live-every-ms`` on ``.page-head``) is shortened by
rewriting the served HTML, so the test reads the template's attribute as it is."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = "browser-rows-live"

# Every external run but ``keep`` long quiet: its banner and its row are the only
# live ones. ``keep`` None: all of them.
QUIET_OTHERS = """
from datetime import timedelta
from django.utils import timezone
from dashboard.models import Run
Run.objects.filter(external=True).exclude(pk={keep!r}).update(
    heartbeat_at=timezone.now() - timedelta(hours=1)
)
print(json.dumps("ok"))
"""

POLLS = "Number(document.body.dataset.rowsPolls || 0)"
# Headless Chromium's tab is never hidden: the page is told it is, then shown again.
HIDE = "Object.defineProperty(document, 'hidden', {value: true, configurable: true})"
SHOW = "delete document.hidden; document.dispatchEvent(new Event('visibilitychange'))"


def faster(page, base: str) -> None:
    """Home and /runs/ served with a 0.5 s interval instead of 5 s (same length)."""

    def handle(route):
        resp = route.fetch()
        body = resp.text().replace(
            'data-live-every-ms="5000"', 'data-live-every-ms="0500"'
        )
        route.fulfill(response=resp, body=body)

    page.context.route(base + "/", handle)
    page.context.route(base + "/runs/", handle)


@pytest.fixture
def send(scripted_live, page, ui):
    """Logged in as alice; ``send(name, step)`` logs one step of external run ``name``
    through trackio's API and returns the run's id."""
    return ui.trackio_sender(page, scripted_live.url, PROJECT)


def cell(run: str, col: str) -> str:
    """A JS expression: the text of run `run`'s cell of column `col`."""
    return f"document.querySelector('[data-run-row=\"{run}\"] .col-{col}')?.textContent"


def test_open_pages_follow_a_training_run_and_stop_when_it_stops(
    scripted_live, send, page, shots, ui
):
    base = scripted_live.url
    for step in range(3):
        run = send("rows-live", step)
    scripted_live.script(QUIET_OTHERS.format(keep=run))
    faster(page, base)
    page.goto(base + "/")
    runs_tab = page.context.new_page()
    runs_tab.guard = ui.Guard(runs_tab)
    runs_tab.goto(base + "/runs/")
    for p in (page, runs_tab):
        p.evaluate("window.__noReload = true")
    banner = page.locator("[data-live-banner]")
    assert "Receiving now: rows-live" in banner.inner_text()
    assert "step 2" in banner.inner_text()
    assert page.evaluate(cell(run, "progress")).strip() == "step 2"
    assert page.locator(f"[data-run-row='{run}'][data-live-row]").count() == 1
    page.check(f"[data-run-row='{run}'] [data-compare-box]")
    runs_tab.check(f"[data-run-row='{run}'] [data-compare-box]")

    # It trains on: banner, progress and latest reward move on both pages.
    for step in range(3, 6):
        send("rows-live", step)
    for p in (page, runs_tab):
        ui.until(p, f"{cell(run, 'progress')}?.trim() === 'step 5'", 10)
        ui.until(p, f"{cell(run, 'latest')}?.trim() === '0.5'", 5)
    ui.until(
        page,
        "/step 5/.test(document.querySelector('[data-live-banner]').textContent)",
        5,
    )
    ui.shot(page, shots, "home_rows_live")

    # A hidden tab asks nothing; shown again, it asks at once.
    page.evaluate(HIDE)
    page.wait_for_timeout(600)  # a fetch under way lands
    hidden_polls = page.evaluate(POLLS)
    page.wait_for_timeout(1500)
    assert page.evaluate(POLLS) == hidden_polls
    page.evaluate(SHOW)
    ui.until(page, f"{POLLS} > {hidden_polls}", 3)

    # A run starts meanwhile: its row comes, the ticked box stays ticked.
    new = send("rows-live-new", 0)
    for p in (page, runs_tab):
        ui.until(p, f"document.querySelector('[data-run-row=\"{new}\"]')", 10)
        assert p.is_checked(f"[data-run-row='{run}'] [data-compare-box]")
        assert p.inner_text("[data-compare-count]") == "1"
        assert p.evaluate("document.body.dataset.rowsLive") == "on"

    # Both go quiet: the banner goes, and the pages stop asking.
    scripted_live.script(QUIET_OTHERS.format(keep=None))
    for p in (page, runs_tab):
        ui.until(p, "document.body.dataset.rowsLive === 'off'", 10)
    assert banner.count() == 0
    assert "not sending" in page.evaluate(cell(run, "status"))
    polls = [p.evaluate(POLLS) for p in (page, runs_tab)]
    assert all(n >= 3 for n in polls), polls
    page.wait_for_timeout(2000)  # four intervals
    assert [p.evaluate(POLLS) for p in (page, runs_tab)] == polls
    for p in (page, runs_tab):
        assert p.evaluate("window.__noReload") is True
        p.guard.check()


def test_a_filtered_list_that_empties_says_so_and_stops_asking(
    scripted_live, send, page, ui
):
    """/runs/?status=running with one live run that then ends: the run leaves the
    filter, so the fresh page has no rows; the list said nothing of it and kept its
    stale row, asking the server every interval for good (review)."""
    base = scripted_live.url
    run = send("rows-filtered", 0)
    scripted_live.script(QUIET_OTHERS.format(keep=run))
    url = base + "/runs/?status=running&q=rows-filtered"

    def handle(route):
        resp = route.fetch()
        body = resp.text().replace(
            'data-live-every-ms="5000"', 'data-live-every-ms="0500"'
        )
        route.fulfill(response=resp, body=body)

    page.context.route(url, handle)
    page.goto(url)
    page.evaluate("window.__noReload = true")
    assert page.locator(f"[data-run-row='{run}'][data-live-row]").count() == 1
    scripted_live.script(
        "from dashboard.models import Run\n"
        f"Run.objects.filter(pk={run!r}).update(status='succeeded')\n"
        "print(json.dumps('ok'))\n"
    )
    ui.until(page, "document.body.dataset.rowsLive === 'off'", 10)
    assert page.locator("[data-run-row]").count() == 0
    assert "No runs match these filters" in page.inner_text("[data-rows-region]")
    polls = page.evaluate(POLLS)
    page.wait_for_timeout(1500)
    assert page.evaluate(POLLS) == polls
    assert page.evaluate("window.__noReload") is True
    page.guard.check()
