"""Charts of an external run as a newcomer met them: a NaN logged at step 7 was
invisible (the API sends "NaN"; the chart dropped it: a chart of NaN alone looked
empty, with axes 0-14 / 0-1, and in a shared chart the NaN series' legend entry had no
points); a right-axis title of one long name was cut at both ends
("pletions/mean_length (right axi"). Now a value that is not a number is marked on
the plot's edge at its step (tooltip, legend, a note under the plot, a gap in the
line), and every axis title fits, its full names as a tooltip."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.runs import external
from tests.fixtures.seed import write_events
alice = get_user_model().objects.get(username='alice')
run = external.do_create_external_run(alice, name='nan-import', framework='custom',
                                      config={})
def events():
    for s in range(1, 15):
        m = {'train/completions/mean_length': 200.0 + 10 * s,
             'train/grad_norm': float('nan') if s == 7 else 0.4 + 0.01 * s,
             'train/learning_rate': 1e-6, 'train/loss': 0.01 * s,
             'train/kl': 0.002 * s, 'train/epoch': 0.1 * s,
             'debug2/inf': {9: float('inf'), 10: float('-inf')}.get(s, 1.0 + 0.1 * s)}
        if s == 7:
            m['debug/only_nan'] = float('nan')
        yield {'type': 'step', 'step': s, 'metrics': m}
run.last_step = write_events(run, events())
run.status = 'succeeded'
run.save()
print(json.dumps(str(run.pk)))
"""

# A chart by the key it plots: its marks, note, legend and axes.
CHART = """(key) => {
  const c = window.__runCharts.find(c => c.keys.includes(key));
  const u = c.plot, over = u.over.getBoundingClientRect();
  const marks = [...u.over.querySelectorAll('.u-odd')].map(m => {
    const r = m.getBoundingClientRect();
    return {key: m.dataset.oddKey, steps: m.dataset.oddSteps, text: m.textContent,
            title: m.title, top: r.top - over.top, bottom: over.bottom - r.bottom,
            x: (r.left + r.right) / 2 - over.left, visible: r.width > 0 && r.height > 0};
  });
  const at = (step) => u.valToPos(step, 'x');
  const legend = [...u.root.querySelectorAll('.u-legend .u-series .u-label')].map(l => l.textContent);
  const note = c.el.parentElement.querySelector('[data-chart-odd]');
  return {id: c.section.dataset.chart, marks, x7: at(7), x9: at(9), x10: at(10), legend,
          note: note && !note.hidden ? note.textContent : null,
          gaps: u.series.slice(1, c.keys.length + 1).map(s => (s._paths && s._paths.gaps || []).length)};
}"""

# Every axis title against the room it has (a y title runs along the plot's height,
# centred on it, inside the canvas), in the axis's own font; and its tooltip.
TITLES = """() => window.__runCharts.filter(c => c.plot).map(c => {
  const u = c.plot, ctx = u.ctx, H = ctx.canvas.height;
  const mid = u.bbox.top + u.bbox.height / 2;
  return {id: c.section.dataset.chart, axes: u.axes.map((a, i) => {
    ctx.save();
    ctx.font = a.labelFont[0];
    const width = ctx.measureText(a.label || '').width;
    ctx.restore();
    const vertical = a.side === 1 || a.side === 3;
    const tip = u.root.querySelector(`[data-axis-title="${i}"]`);
    return {label: a.label, width, vertical,
            room: vertical ? 2 * Math.min(mid, H - mid) : u.bbox.width,
            tip: tip ? tip.title : null};
  })};
})"""


@pytest.fixture(scope="module")
def run_id(live):
    return live.script(SEED)


def _open_run(browser, ui, live, run_id, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.guard = ui.Guard(page)
    page.set_default_timeout(20_000)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run_id}/")
    ui.until(
        page,
        "document.body.dataset.chartsReady && window.__runCharts"
        " .filter(c => c.section.dataset.chart.startsWith('extra-'))"
        " .every(c => c.plot) && window.__runCharts.length",
        30,
    )
    page.wait_for_timeout(300)
    return context, page


def test_nan_and_infinity_are_shown_not_dropped(live, browser, run_id, ui, out_dir):
    context, page = _open_run(browser, ui, live, run_id, 1280)
    try:
        page.locator("[data-chart-odd]").first.scroll_into_view_if_needed()
        page.screenshot(path=str(out_dir / "charts_nonfinite_1280.png"), full_page=True)

        # A chart sharing several series: grad_norm's NaN at step 7 is a mark on the
        # top edge, at step 7, in the legend and the note, and a gap in its line.
        shared = page.evaluate(CHART, "train/grad_norm")
        marks = [m for m in shared["marks"] if m["key"] == "train/grad_norm"]
        assert len(marks) == 1, shared
        mark = marks[0]
        assert mark["steps"] == "7" and mark["text"] == "NaN" and mark["visible"], mark
        assert mark["title"] == "train/grad_norm: NaN at step 7", mark
        assert abs(mark["x"] - shared["x7"]) <= 1 and 0 <= mark["top"] <= 4, mark
        assert any(
            "train/grad_norm" in t and "NaN at step 7" in t for t in shared["legend"]
        ), shared
        assert "train/grad_norm: NaN at step 7" in shared["note"], shared
        keys = page.evaluate(
            "window.__runCharts.find(c => c.keys.includes('train/grad_norm')).keys"
        )
        assert shared["gaps"][keys.index("train/grad_norm")] == 1, shared
        assert sum(shared["gaps"]) == 1, shared  # the other series are whole lines

        # A chart of NaN alone says so instead of looking empty.
        alone = page.evaluate(CHART, "debug/only_nan")
        assert [m["steps"] for m in alone["marks"]] == ["7"], alone
        assert alone["marks"][0]["visible"], alone
        assert (
            alone["note"] and "every value logged here is not a number" in alone["note"]
        )
        assert "debug/only_nan: NaN at step 7" in alone["note"], alone
        # ...and the "No data yet." placeholder does not claim nothing came.
        nodata = page.locator(f"[data-chart='{alone['id']}'] [data-nodata]")
        assert nodata.count() == 0 or not nodata.is_visible()

        # +inf on the top edge at its step, -inf on the bottom edge at its step.
        inf = page.evaluate(CHART, "debug2/inf")
        by_step = {m["steps"]: m for m in inf["marks"]}
        assert set(by_step) == {"9", "10"}, inf
        assert by_step["9"]["text"] == "+\u221e" and by_step["9"]["top"] <= 4, inf
        assert (
            by_step["10"]["text"] == "\u2212\u221e" and by_step["10"]["bottom"] <= 4
        ), inf
        assert abs(by_step["9"]["x"] - inf["x9"]) <= 1, inf
        assert abs(by_step["10"]["x"] - inf["x10"]) <= 1, inf

        # The keyboard readout names the NaN (it read "—", as if nothing was logged).
        section = page.locator(f"[data-chart='{shared['id']}']")
        section.scroll_into_view_if_needed()
        section.locator("[data-plot]").focus()
        for _ in range(7):
            page.keyboard.press("ArrowRight")
        readout = section.locator("[data-readout]").inner_text()
        assert readout.startswith("step 7:") and "train/grad_norm NaN" in readout, (
            readout
        )
        # So does the legend at that step.
        values = page.evaluate(
            "() => { const c = window.__runCharts.find(c => c.keys.includes('train/grad_norm'));"
            " const k = c.keys.indexOf('train/grad_norm');"
            " return c.plot.root.querySelectorAll('.u-legend .u-series .u-value')[k + 1].textContent; }"
        )
        assert values == "NaN", values
        section.screenshot(path=str(out_dir / "charts_nonfinite_readout.png"))
        page.guard.check()
    finally:
        context.close()


@pytest.mark.parametrize("width", [800, 1280])
def test_every_axis_title_fits(live, browser, run_id, ui, out_dir, width):
    context, page = _open_run(browser, ui, live, run_id, width)
    try:
        page.screenshot(
            path=str(out_dir / f"charts_axis_titles_{width}.png"), full_page=True
        )
        charts = page.evaluate(TITLES)
        assert len(charts) >= 4, charts
        for chart in charts:
            for axis in chart["axes"]:
                if axis["label"] is None:
                    continue
                assert axis["width"] <= axis["room"], (chart["id"], axis)
        by_id = {c["id"]: c for c in charts}
        train = next(
            c
            for c in charts
            if any("mean_length" in (a["tip"] or "") for a in c["axes"])
        )
        right = train["axes"][2]
        # One long name, cut in its middle: its last part (what tells it apart) stays.
        assert right["tip"] == "train/completions/mean_length (right axis)", right
        assert right["label"].startswith("train/") and right["label"].endswith(
            "mean_length"
        ), right
        assert "\u2026" in right["label"], right
        # Titles that fit are left whole.
        assert by_id[train["id"]]["axes"][0]["label"] == "training step"
        page.locator(f"[data-chart='{train['id']}']").screenshot(
            path=str(out_dir / f"charts_axis_title_train_{width}.png")
        )
        page.guard.check()
    finally:
        context.close()
