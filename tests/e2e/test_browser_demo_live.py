"""``make run`` leaves a demo to watch (issue 11, item 9): after the quick calc demo,
the long swarm demo is training, and the home page leads to it in one click. (The
real ``manage.py serve --demo`` path is in test_embedded_smoke.py; here the runs'
states are set directly so the browser sees the moment a late newcomer arrives.)"""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from django.core.management import call_command
from dashboard.runs import lease
from dashboard.models import Run
lease.enqueue = lambda *a, **k: None  # nothing executes in this short process
call_command('bootstrap_demo', force=True, username='alice')
alice = get_user_model().objects.get(username='alice')
alice.set_password('pw-browser-123')  # bootstrap gave it the demo password
alice.save()
# The session's server is shared: alice may own other tests' runs too.
mine = Run.objects.filter(owner__username='alice')
quick = mine.filter(name__startswith='demo: calc').latest('created_at')
long = mine.filter(name__startswith='demo: swarm').latest('created_at')
Run.objects.filter(pk=quick.pk).update(status='succeeded', last_step=200)
Run.objects.filter(pk=long.pk).update(status='running', last_step=37)
# The moment is one where only the demo trains: an external run an earlier test
# left sending (in this worker's server, whichever tests ran before) has finished.
Run.objects.filter(external=True, status='running').update(status='succeeded')
print(json.dumps(str(long.pk)))
"""


def test_the_home_page_leads_a_late_newcomer_to_the_demo_training_now(
    live, page, shots, ui
):
    long_id = live.script(SEED)
    ui.login(page, live.url)
    page.goto(live.url + "/")
    banner = page.locator("[data-live-banner]")
    assert banner.is_visible()
    box = banner.bounding_box()
    assert box is not None and box["y"] < 300  # first thing on the page
    assert "Training now: demo: swarm, live for a while" in banner.text_content()
    ui.shot(page, shots, "home_live_demo", full=False)
    # The home tables fit their panels at 1280 px (Age and Owner were cut off).
    page.set_viewport_size({"width": 1280, "height": 900})
    fits = page.evaluate(
        "() => [...document.querySelectorAll('.panel table')].map(t =>"
        " t.getBoundingClientRect().right <= t.closest('.panel').getBoundingClientRect().right + 0.5)"
    )
    assert fits and all(fits), fits
    ui.shot(page, shots, "home_1280", full=False)
    banner.click()
    page.wait_for_url(re.compile(rf".*/runs/{long_id}/$"))
    assert page.text_content("[data-run-status] .badge") == "running"
    page.guard.check()
