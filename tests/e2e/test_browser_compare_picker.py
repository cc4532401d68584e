"""The menu's "Compare" opened /compare/ on "Pick between 2 and 8 runs to compare (got
0)" with no way to pick. Now it lists the user's recent runs with the runs list's
boxes: tick two, Compare, and they are compared; names stay text, at 1400 and 800 px."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HOSTILE = "<img src=x onerror=alert(1)> picked"

SEED = f"""
from django.contrib.auth import get_user_model
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
a = seed_run(alice, name={HOSTILE!r}, env='calc', preset='grpo', steps=3, seed=1)
b = seed_run(alice, name='picked second', env='calc', preset='dr_grpo', steps=3, seed=2)
print(json.dumps([str(a.pk), str(b.pk)]))
"""


@pytest.mark.parametrize("width", [1400, 800])
def test_the_menus_compare_offers_runs_to_pick(
    live, browser, ui, shots, width, seeded_runs
):
    a, b = live.script(SEED)
    seeded_runs.extend([a, b])
    with ui.signed_in(browser, live, width) as page:
        page.goto(live.url + "/")
        menu = page.locator("nav a", has_text="Compare")
        if menu.count() and menu.first.is_visible():
            menu.first.click()
        else:  # a narrow menu folded away: the link it holds
            page.goto(live.url + "/compare/")
        page.wait_for_url(re.compile(r".*/compare/$"))
        assert "tick them below" in page.text_content("[data-compare-pick]")
        button = page.locator("[data-compare-button]")
        assert button.is_disabled()
        row = page.locator(f"[data-run-row='{a}']")
        assert row.locator(".col-name a").text_content() == HOSTILE
        assert page.locator("img[src=x]").count() == 0
        page.check(f"[data-compare-box][value='{a}']")
        assert button.is_disabled()  # one is not a comparison
        page.check(f"[data-compare-box][value='{b}']")
        assert button.is_enabled() and page.text_content("[data-compare-count]") == "2"
        ui.shot(page, shots, f"compare_picker_{width}", full=False)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        button.click()
        page.wait_for_url(re.compile(r".*/compare/\?runs="))
        assert page.locator("[data-summary] tbody tr").count() == 2
        assert HOSTILE in page.text_content("[data-summary]")
