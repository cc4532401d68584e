"""A chart whose series is on its way says "Loading…", not "No data yet." (a finished
run's charts said that for a second, as if it had logged nothing), then draws; a chart
with nothing to draw says why once its answer is in."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = r"""
from dashboard.ingest import writer
from dashboard.models import Run
from dashboard.runs import services
from django.contrib.auth import get_user_model

owner = get_user_model().objects.get(username="alice")
cfg = services.check_config({"name": "charts load", "env": {"name": "calc"},
                             "model": {"size": "tiny", "device": "cpu"}})
run = Run.objects.create(owner=owner, name="charts load", status="succeeded",
                         queue="cpu", config=cfg.model_dump(mode="json"), last_step=5)
batch = writer.Batch()
for step in range(1, 6):
    batch.add(run.id, {"type": "step", "step": step,
                       "metrics": {"reward": 0.1 * step, "reward_std": 0.05}})
writer.write(run.id, batch)
print(json.dumps(str(run.pk)))
"""


def test_a_chart_says_loading_until_its_series_comes(live, page, ui):
    run_id = live.script(SEED)
    ui.login(page, live.url)
    held = []
    # The metrics answers wait until the test lets them go.
    page.route("**/metrics**", lambda route: held.append(route))
    page.goto(f"{live.url}/runs/{run_id}/")
    reward = page.locator("[data-chart=reward] [data-nodata]")
    ui.until(page, "document.querySelector('[data-chart=reward] [data-nodata]')"
                   ".textContent === 'Loading…'")  # fmt: skip
    assert "No data yet" not in page.locator("[data-charts]").inner_text()
    while held or page.locator("[data-nodata][data-loading]").count():
        for route in held[:]:
            held.remove(route)
            route.continue_()
        page.wait_for_timeout(100)
    assert reward.is_hidden()  # drawn
    kl = page.locator("[data-chart=kl] [data-nodata]")
    assert kl.is_visible() and kl.text_content() != "Loading…"
