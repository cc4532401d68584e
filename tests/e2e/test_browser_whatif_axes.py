"""The what-if chart's axes, as a newcomer met them: three counts (trajectories,
groups; up to 24) and a 0-1 share (token_flip_share) on one axis, so the share was a
flat line at 0; no y axis title, and no line saying what the chart shows (every other
chart has one). Now the share has the right axis to itself, both axes are titled,
and a line above the plot says what each series counts."""

from __future__ import annotations

import pytest

from tests.e2e.test_browser_whatif import SEED

pytestmark = [pytest.mark.browser, pytest.mark.slow]

AXES = """() => {
  const c = window.__whatifChart, u = c.plot;
  const px = (k) => { const s = u.series[k + 1]; return u.data[k + 1].filter(v => v !== null).map(v => u.valToPos(v, s.scale)); };
  const span = (k) => { const p = px(k); return p.length ? Math.max(...p) - Math.min(...p) : 0; };
  return {
    keys: c.keys,
    scales: u.series.slice(1).map(s => s.scale),
    axes: u.axes.map(a => ({side: a.side, scale: a.scale, label: a.label, show: a.show !== false})),
    tips: [...u.root.querySelectorAll('[data-axis-title]')].map(t => t.title),
    y: [u.scales.y.min, u.scales.y.max], y2: u.scales.y2 ? [u.scales.y2.min, u.scales.y2.max] : null,
    share: u.data[4].filter(v => v !== null), counts: [1, 2, 3].flatMap(i => u.data[i].filter(v => v !== null)),
    shareSpan: span(3), height: u.bbox.height / devicePixelRatio,
    legend: [...u.root.querySelectorAll('.u-legend .u-series .u-label')].map(l => l.textContent),
  };
}"""


def test_the_share_has_the_right_axis_and_both_axes_say_what_they_count(
    live, page, ui, out_dir
):
    run_id = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run_id}/")
    panel = page.locator("#whatif")
    panel.locator("[data-weight=r_parallel]").fill("0")
    panel.locator("[data-whatif-run]").click()
    ui.until(page, "window.__whatifChart && window.__whatifChart.plot")
    page.wait_for_timeout(300)
    plot = panel.locator("[data-whatif-plot]")
    plot.scroll_into_view_if_needed()
    panel.screenshot(path=str(out_dir / "whatif_axes.png"))
    got = page.evaluate(AXES)

    # The share on the right axis, the counts on the left.
    k = got["keys"].index("token_flip_share")
    assert got["scales"][k] == "y2", got
    assert [s for i, s in enumerate(got["scales"]) if i != k] == ["y"] * 3, got
    right = [a for a in got["axes"] if a["scale"] == "y2"]
    assert len(right) == 1 and right[0]["side"] == 1, got
    # The share is drawn on its own scale: it spans the plot, not a line at 0 under
    # counts many times larger.
    assert max(got["counts"]) >= 5 * max(got["share"]), got  # the data that hid it
    assert 0 < max(got["share"]) <= 1, got
    assert got["y2"][1] <= 1.5 and got["y"][1] >= max(got["counts"]), got
    assert got["shareSpan"] >= 0.25 * got["height"], got

    # Both y axes titled, as every other chart's are; the legend says which is right.
    left = [a for a in got["axes"] if a["scale"] == "y"][0]
    assert left["label"] == "trajectories / groups", got
    assert right[0]["label"] == "share of trained tokens", got
    assert {"trajectories / groups", "share of trained tokens"} <= set(got["tips"])
    assert any(t.endswith("(right axis)") for t in got["legend"]), got

    # A line above the plot says what the chart shows, as the other charts' do.
    help_ = panel.locator("[data-whatif-chart-help]")
    assert help_.is_visible()
    text = help_.inner_text()
    assert "left axis" in text and "right axis" in text and "share" in text
    assert help_.bounding_box()["y"] + help_.bounding_box()["height"] <= (
        plot.bounding_box()["y"] + 1
    )
    assert plot.get_attribute("aria-describedby") == help_.get_attribute("id")
    page.guard.check()
