"""The cancel question follows the run's live status, both ways: a page opened while
the run was queued must ask to stop it "at its next step" once it runs, and a run
that goes back to the queue (paused) must be asked about as queued again (it kept
"Stop this run at its next step?")."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import Run, RunStatus
alice = get_user_model().objects.get(username='alice')
run = Run.objects.create(owner=alice, name='cancel question',
                         config={'steps': 50, 'env': {'name': 'calc'}})
assert run.status == RunStatus.QUEUED
print(json.dumps(str(run.pk)))
"""

QUESTION = "document.querySelector('[data-cancel-question]').textContent"
BADGE = "document.querySelector('[data-run-status]').innerText"
QUEUED = "Cancel this queued run? It will not start."
RUNNING = "Stop this run at its next step? What it recorded so far is kept."
PAUSED = (
    "Cancel this run? It is queued after step 5 and will not go on; "
    "what it recorded is kept."
)


def _set(live, run: str, **fields) -> None:
    updates = ", ".join(f"{k}={v}" for k, v in fields.items())
    live.script(
        "from django.utils import timezone\n"
        "from dashboard.models import Run, RunStatus\n"
        f"Run.objects.filter(pk={run!r}).update({updates})\n"
        "print(1)"
    )


def test_the_cancel_question_follows_the_live_status(live, page, shots, ui):
    run = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run}/")
    page.click("[data-cancel]")
    assert page.text_content("[data-cancel-question]") == QUEUED

    # It starts while the page is open (the page polls a queued run's status).
    _set(
        live,
        run,
        status="RunStatus.RUNNING",
        started_at="timezone.now()",
        heartbeat_at="timezone.now()",
    )
    ui.until(page, f"{BADGE}.includes('running')")
    ui.until(page, f"{QUESTION} === {RUNNING!r}", 5)
    ui.shot(page, shots, "cancel_question_running", full=False)

    # It goes back to the queue after step 5 (paused): what the page learns from its
    # stream (a backfill, as after a quiet spell or a reconnect) changes the question.
    _set(live, run, status="RunStatus.QUEUED", last_step=5)
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    page.evaluate("window.__runStream.backfill()")
    ui.until(page, f"{BADGE}.includes('queued')")
    # It has run: cancelling now means it will not go on, not that it will not start.
    ui.until(page, f"{QUESTION} === {PAUSED!r}", 5)
    assert (
        page.text_content("[data-live-text]") == "connected; queued again after step 5"
    )
    ui.shot(page, shots, "cancel_question_paused", full=False)
    page.reload()  # the server says the same
    page.click("[data-cancel]")
    assert page.text_content("[data-cancel-question]") == PAUSED
    page.guard.check()
    # No trainer plays it: ended here, not left for the session's cleanup to wait on.
    _set(live, run, status="RunStatus.CANCELLED")


def test_a_run_that_stopped_before_the_page_after_its_cancel_drops_the_pending_flash(
    live, page, ui
):
    """The trainer may stop between the cancel and the page its redirect opens: the
    page then opens on a cancelled run with the flash "Cancel requested: the run
    stops at its next step." (rendered with the POST), which nothing took away (a
    CI run's flow test failed on it)."""
    run = live.script(SEED)
    _set(live, run, status="RunStatus.RUNNING", started_at="timezone.now()",
         heartbeat_at="timezone.now()")  # fmt: skip
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run}/")
    page.click("[data-cancel]")

    def stop_after(route):  # the run ends before the redirected page is served
        response = route.fetch(max_redirects=0)
        _set(live, run, status="RunStatus.CANCELLED", finished_at="timezone.now()")
        route.fulfill(response=response)

    page.route(f"{live.url}/runs/{run}/cancel/", stop_after)
    page.click("[data-cancel-confirm]")
    page.wait_for_load_state()
    assert "cancelled" in page.inner_text("[data-run-status]")
    assert page.locator(".messages .cancel-pending").count() == 1  # rendered...
    ui.until(
        page,
        "[...document.querySelectorAll('.messages .cancel-pending')]"
        ".every((li) => li.hidden)",
        5,
    )  # ...and gone
