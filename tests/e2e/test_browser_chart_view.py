"""The charts of a page as one view, as W&B's workspace is: a smoothing slider (a
debiased exponential moving average, the logged values kept as a faint line and in
the legend), a cursor shared by every chart, a drag on one chart zooming them all
(kept as live points arrive; a double click, or "show every step", back to all), and
a log scale per chart where its values allow one. The choices outlive a reload and
reach the compare page. Before, a W&B user found no smoothing, no shared cursor, no
log scale, and a zoom that the next live point undid."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import Run
from dashboard.pages.forms import default_config
from tests.fixtures.seed import write_events
alice = get_user_model().objects.get(username='alice')
cfg = default_config('calc')
runs = []
for name in ('view a', 'view b'):
    run = Run.objects.create(name=name, owner=alice, config=cfg, status='succeeded')
    def events():
        for s in range(1, 61):
            yield {'type': 'step', 'step': s, 'metrics': {
                'reward': 0.5 + 0.04 * ((s * 37) % 11 - 5), 'reward_std': 0.1,
                'kl': 0.001 * 1.1 ** s, 'kl/coef': 0.01,
                'loss': -0.1 + 0.01 * (s % 5), 'grad_norm': 1.0 + 0.01 * s}}
    run.last_step = write_events(run, events())
    run.save()
    runs.append(str(run.pk))
print(json.dumps(runs))
"""

REWARDS = [0.5 + 0.04 * ((s * 37) % 11 - 5) for s in range(1, 61)]


def ema(values, w):
    """TensorBoard's smoothing, debiased at the start."""
    last, out = 0.0, []
    for n, v in enumerate(values, 1):
        last = last * w + (1 - w) * v
        out.append(last / (1 - w**n))
    return out


CHART = """(id) => {
  const c = window.__runCharts.find(c => c.el.closest('[data-chart]')?.dataset.chart === id);
  const u = c.plot;
  return {
    data: u.data.map(col => [...col]),
    labels: u.series.map(s => s.label),
    rawAt: c.rawAt, x: [u.scales.x.min, u.scales.x.max], distr: u.scales.y.distr,
    idx: u.cursor.idx,
  };
}"""
READY = (
    "window.__runCharts && ['reward', 'kl', 'loss'].every(id =>"
    " window.__runCharts.some(c => c.plot && c.plot.data[0].length === 60 &&"
    " c.el.closest('[data-chart]')?.dataset.chart === id))"
)


def test_smoothing_cursor_zoom_and_log_scale_across_the_charts(live, page, shots, ui):
    run, other = live.script(SEED)
    ui.login(page, live.url)
    url = f"{live.url}/runs/{run}/"
    page.goto(url)
    ui.until(page, READY, 30)
    assert page.input_value("[data-smoothing-value]") == "0"
    plain = page.evaluate(CHART, "reward")
    assert plain["rawAt"] is None and plain["data"][1] == pytest.approx(REWARDS)

    # Smoothing 0.9: the line is the debiased average, the logged values a faint
    # line out of the legend, and both in the legend's value and the readout.
    page.fill("[data-smoothing-value]", "0.9")
    page.press("[data-smoothing-value]", "Enter")
    ui.until(page, "window.__runCharts[0].rawAt !== null", 10)
    r = page.evaluate(CHART, "reward")
    assert r["data"][1] == pytest.approx(ema(REWARDS, 0.9))
    assert r["data"][r["rawAt"]] == pytest.approx(REWARDS)
    assert "reward (logged)" in r["labels"]
    assert page.input_value("[data-smoothing]") == "0.9"
    assert page.locator("[data-chart=reward] .u-legend .u-raw-series").first.is_hidden()
    page.focus("[data-chart=reward] [data-plot]")
    page.keyboard.press("End")
    readout = page.text_content("[data-chart=reward] [data-readout]")
    smoothed, logged = ema(REWARDS, 0.9)[-1], REWARDS[-1]
    assert readout.startswith(f"step 60: reward {smoothed:.4g} (logged {logged:.4g})")
    ui.shot(page, shots, "chart_view_smoothed", full=False)

    # A shared cursor: hovering the reward chart moves the KL chart's to that step.
    box = page.locator("[data-chart=reward] .u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    ui.until(
        page,
        "(() => { const cs = window.__runCharts; const a = cs[0].plot.cursor.idx;"
        " const kl = cs.find(c => c.el.closest('[data-chart]')?.dataset.chart === 'kl');"
        " return a !== null && a !== undefined && kl.plot.cursor.idx === a; })()",
        5,
    )

    # A drag zooms every chart to its steps, and does not open a step.
    y = box["y"] + box["height"] * 0.5
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
    page.mouse.up()
    page.wait_for_timeout(500)
    assert page.url == url
    zoom = page.evaluate("window.__chartView.zoom")
    assert zoom and 10 < zoom[0] < 20 and 25 < zoom[1] < 35, zoom
    for cid in ("reward", "kl", "loss"):
        assert page.evaluate(CHART, cid)["x"] == pytest.approx(zoom), cid
    assert page.locator("[data-zoom-reset]").is_visible()
    # The keys read the steps shown: Home is the zoom's first step, not step 1.
    page.focus("[data-chart=reward] [data-plot]")
    page.keyboard.press("Home")
    first = int(
        page.text_content("[data-chart=reward] [data-readout]").split(":")[0][5:]
    )
    assert zoom[0] <= first <= zoom[0] + 1, (first, zoom)
    # A live point does not undo it.
    page.evaluate("window.__runCharts[0].add(61, {reward: 0.5})")
    page.wait_for_timeout(300)
    assert page.evaluate(CHART, "reward")["x"] == pytest.approx(zoom)
    ui.shot(page, shots, "chart_view_zoomed", full=False)
    # A double click: every step again, on every chart, and still this page.
    page.mouse.dblclick(box["x"] + box["width"] * 0.4, y)
    page.wait_for_timeout(500)
    assert page.url == url
    assert page.evaluate("window.__chartView.zoom") is None
    assert page.evaluate(CHART, "kl")["x"] == [1, 60]
    assert page.evaluate(CHART, "reward")["x"] == [1, 61]

    # A log scale where the values allow one (KL > 0), refused with the reason where
    # they do not (a loss below 0).
    assert page.is_enabled("[data-log-scale=kl]")
    assert page.is_disabled("[data-log-scale=loss]")
    why = page.get_attribute("[data-chart=loss] .log-toggle", "title")
    assert why.startswith("a log scale needs every value above 0 (lowest here: -0.1")
    page.check("[data-log-scale=kl]")
    ui.until(page, "window.__runCharts.some(c => c.logOn)", 5)
    assert page.evaluate(CHART, "kl")["distr"] == 3
    # No box where there is nothing to scale yet.
    assert page.locator("[data-chart=advantages] .log-toggle").is_hidden()
    page.locator("[data-chart=kl]").scroll_into_view_if_needed()
    ui.shot(page, shots, "chart_view_log", full=False)

    # A click that wobbles two pixels is a click: no zoom to a sliver, and it opens
    # the step under it.
    page.locator("[data-chart=reward]").scroll_into_view_if_needed()
    box = page.locator("[data-chart=reward] .u-over").bounding_box()
    x, y = box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 2, y, steps=2)
    page.mouse.up()
    page.wait_for_url(f"{live.url}/runs/{run}/trajectories/?step=*")

    # Kept: smoothing and the log scale after a reload; the smoothing on compare.
    page.goto(url)
    ui.until(page, READY, 30)
    assert page.input_value("[data-smoothing-value]") == "0.9"
    assert page.is_checked("[data-log-scale=kl]")
    assert page.evaluate(CHART, "kl")["distr"] == 3
    page.goto(f"{live.url}/compare/?runs={run},{other}")
    ui.until(
        page,
        "window.__compareMetricCharts?.length && window.__compareMetricCharts[0].plot",
        30,
    )
    c = page.evaluate(
        "(() => { const c = window.__compareMetricCharts[0]; return"
        " {rawAt: c.rawAt, labels: c.plot.series.map(s => s.label)}; })()"
    )
    assert c["rawAt"] is not None and any("(logged)" in lbl for lbl in c["labels"])
    ui.shot(page, shots, "chart_view_compare", full=False)
    # A run hidden from one chart's legend is hidden from every chart, its faint
    # logged line with it.
    page.goto(f"{live.url}/compare/?runs={run},{other}&charts=reward,kl")
    ui.until(
        page,
        "window.__compareMetricCharts?.length === 2"
        " && window.__compareMetricCharts.every(c => c.plot && c.rawAt !== null)",
        30,
    )
    page.locator("[data-compare-chart=reward] .u-legend tr.u-series").nth(2).click()
    shown = (
        "window.__compareMetricCharts.map(c =>"
        " [c.plot.series[2].show, c.plot.series[c.rawAt + 1].show,"
        " c.plot.series[1].show])"
    )
    ui.until(page, f"{shown}.every(([b, braw, a]) => !b && !braw && a)", 5)
    # A chart made again (a log scale asked for) keeps the run hidden.
    page.check("[data-log-scale='metric:kl']")
    ui.until(page, "window.__compareMetricCharts.some(c => c.logOn)", 5)
    ui.until(page, f"{shown}.every(([b, braw, a]) => !b && !braw && a)", 5)
    page.locator("[data-compare-chart=kl] .u-legend tr.u-series").nth(2).click()
    ui.until(page, f"{shown}.every(([b, braw, a]) => b && braw && a)", 5)
    # Back to 0: the logged values alone, as before.
    page.fill("[data-smoothing-value]", "0")
    page.press("[data-smoothing-value]", "Enter")
    ui.until(page, "window.__compareMetricCharts[0].rawAt === null", 5)
    page.guard.check()
