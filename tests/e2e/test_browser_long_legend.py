"""A metric with a long name (TRL's ``profiling/Time taken: GRPOTrainer.
_get_per_token_logps_and_entropies``) wraps in its chart's legend: the run page
scrolled sideways at 1360 px (1502 px wide), the legend running past its card."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = [
    "profiling/Time taken: GRPOTrainer._get_per_token_logps_and_entropies",
    "profiling/Time taken: GRPOTrainer._calculate_rewards_and_advantages_for_batch",
    "profiling/Time taken: GRPOTrainer._prepare_inputs",
]


@pytest.mark.parametrize("width", [1360, 800])
def test_long_metric_names_wrap_inside_their_chart(live, page, ui, shots, width):
    send = ui.trackio_sender(page, live.url, f"long-legend-{width}")
    metrics = {"train/reward": 0.5, **{k: 0.01 for k in LONG}}
    run = send("profiled", [1, 2, 3], metrics=metrics)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live.url}/runs/{run}/")
    page.wait_for_selector("[data-chart] .u-legend")
    page.wait_for_timeout(500)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, f"the page is {wide} px wide in a {width} px window"
    over = page.evaluate(
        "[...document.querySelectorAll('[data-chart]')].filter((c) =>"
        " c.scrollWidth > c.clientWidth + 1).map((c) => c.dataset.chart)"
    )
    assert over == []
    page.locator("[data-chart^=extra-]").first.scroll_into_view_if_needed()
    ui.shot(page, shots, f"long_legend_{width}", full=False)
