"""What only a browser shows (issue 11, item 13): on a phone the runs table keeps the
latest reward and the algorithm in view without a sideways scroll; cancel asks before
it acts; the Export and Cancel menus close on Escape."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import Run
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
run = seed_run(alice, name='a run with a fairly long name', env='swarm', steps=8)
Run.objects.filter(pk=run.pk).update(status='queued', last_step=0)  # never started
print(json.dumps(str(run.pk)))
"""


def test_phone_runs_table_and_cancel_that_asks(live, browser, shots, ui):
    run = live.script(SEED)
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.guard = ui.Guard(page)
    try:
        ui.login(page, live.url)
        page.goto(live.url + "/runs/")
        row = f"[data-run-row='{run}']"
        page.wait_for_selector(row)
        wrap = page.evaluate(
            "() => { const w = document.querySelector('.table-wrap');"
            " return [w.scrollWidth, w.clientWidth, window.innerWidth,"
            " document.documentElement.scrollWidth]; }"
        )
        ui.shot(page, shots, "phone_runs_table", full=False)
        assert wrap[0] <= wrap[1] and wrap[3] <= wrap[2], wrap
        # latest reward, algorithm (after cmp, name, group, status...)
        for col in (7, 8):
            box = page.locator(f"{row} td:nth-child({col})").bounding_box()
            assert box is not None and box["x"] + box["width"] <= 390, (col, box)

        page.goto(f"{live.url}/runs/{run}/")
        # The pop-over menus close on Escape, focus back on their button (a walk
        # found Export… staying open, the shortcuts dialog opening over it).
        page.click(".export-menu summary")
        assert page.is_visible("[data-export-form]")
        page.keyboard.press("Escape")
        assert not page.is_visible("[data-export-form]")
        assert page.evaluate("document.activeElement.closest('.export-menu') !== null")
        page.click(".export-menu summary")
        ui.shot(page, shots, "phone_export_menu", full=False)
        box = page.locator("[data-export-form]").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box  # on the screen
        page.focus("[data-export-form] input[type=checkbox]")  # focus in the menu
        page.keyboard.press("Escape")
        assert not page.is_visible("[data-export-form]")
        page.click("[data-cancel]")
        page.keyboard.press("Escape")
        assert not page.is_visible("[data-cancel-form]")
        page.click("[data-cancel]")
        assert "It will not start." in page.text_content("[data-cancel-question]")
        ui.shot(page, shots, "cancel_asks_first", full=False)
        status = live.script(
            f"from dashboard.models import Run\n"
            f"print(json.dumps(Run.objects.get(pk={run!r}).status))"
        )
        assert status == "queued"  # one click asked, did nothing
        page.click("[data-cancel-confirm]")
        page.wait_for_selector(".messages")
        assert "Cancelled before it started" in page.text_content(".messages")
        page.guard.check()
    finally:
        context.close()
