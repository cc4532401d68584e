"""A NaN drawn the same way on every page, as a newcomer met it: a trackio run logging
``train/reward`` NaN at steps 3 and 7 (7 its last step). The run page's chart broke
its line and marked both ("NaN at steps 3, 7"), but compare's overlay drew a straight
line through step 3 and silently dropped step 7, and the runs list's sparkline
bridged the gap; on the run page the step-7 NaN mark covered the other series' last
point. Now compare draws with the run page's chart (marks, legend, note, a gap), the
sparkline breaks (a tick on its top edge at each NaN), and the y scale leaves the
marks their room above the highest point."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
import math, uuid
from django.contrib.auth import get_user_model
from dashboard.models import Run
from dashboard.runs import external, trackio
from tests.fixtures.seed import write_events
alice = get_user_model().objects.get(username='alice')
ids = {}
# Two runs as trackio's client reports them: train/reward NaN at steps 3 and 7 (the
# last), and one without a NaN.
for name, reward in (('nan-reward', lambda s: math.nan if s in (3, 7) else 0.1 * s),
                     ('plain', lambda s: 0.05 * s)):
    rid = uuid.uuid4().hex
    trackio.do_bulk_log(alice, [
        {'project': 'walk-nan', 'run': name, 'run_id': rid, 'step': s,
         'metrics': {'train/reward': reward(s), 'train/loss': 1.0 / (s + 1)},
         'config': {'model': 'Qwen/Qwen2.5-0.5B'}, 'log_id': uuid.uuid4().hex}
        for s in range(8)])
    ids[name] = str(Run.objects.get(external_id=rid).pk)
# One chart of two series: grad_norm NaN at steps 3 and 7 (the last), loss at its
# highest at step 7, where the NaN's mark is drawn on the top edge.
run = external.do_create_external_run(alice, name='nan-cover', framework='custom', config={})
def events():
    for s in range(1, 8):
        yield {'type': 'step', 'step': s, 'metrics': {
            'train/grad_norm': math.nan if s in (3, 7) else 0.3 + 0.02 * s,
            'train/loss': (s - 1) / 6}}
run.last_step = write_events(run, events())
run.status = 'succeeded'
run.save()
ids['cover'] = str(run.pk)
print(json.dumps(ids))
"""

# A MetricChart (``c``): its marks, legend, note and gaps, and every point of another
# series that a mark covers (a 3 px dot against the mark's box).
CHART = """(c) => {
  const u = c.plot, over = u.over.getBoundingClientRect();
  const marks = [...u.over.querySelectorAll('.u-odd')].map(m => {
    const r = m.getBoundingClientRect();
    return {key: m.dataset.oddKey, steps: m.dataset.oddSteps, text: m.textContent, title: m.title,
            left: r.left - over.left, right: r.right - over.left,
            top: r.top - over.top, bottom: r.bottom - over.top, x: (r.left + r.right) / 2 - over.left};
  });
  const covered = [];
  c.keys.forEach((key, k) => {
    const s = u.series[k + 1];
    u.data[k + 1].forEach((v, i) => {
      if (v === null) return;
      const x = u.valToPos(u.data[0][i], 'x'), y = u.valToPos(v, s.scale);
      for (const m of marks) if (m.key !== key && x + 3 > m.left && x - 3 < m.right && y + 3 > m.top && y - 3 < m.bottom)
        covered.push({key, step: u.data[0][i], x, y, mark: m});
    });
  });
  const gaps = u.series.slice(1, c.keys.length + 1).map(s => (s._paths && s._paths.gaps || []).map(g => g.map(p => p / devicePixelRatio)));
  const note = c.el.parentElement.querySelector('[data-chart-odd]');
  return {keys: c.keys, marks, covered, gaps, x: [3, 6, 7].map(s => u.valToPos(s, 'x')),
          legend: [...u.root.querySelectorAll('.u-legend .u-series .u-label')].map(l => l.textContent),
          note: note && !note.hidden ? note.textContent : null};
}"""


@pytest.fixture(scope="module")
def ids(live):
    return live.script(SEED)


def _marked_at(chart, key, steps):
    marks = [m for m in chart["marks"] if m["key"] == key]
    assert sorted(m["steps"] for m in marks) == sorted(steps), chart
    for m in marks:
        assert m["text"] == "NaN", m
        at = chart["x"][[3, 6, 7].index(int(m["steps"]))]
        assert abs(m["x"] - at) <= 1, (m, chart["x"])
    return marks


def test_compare_breaks_the_line_at_a_nan_and_marks_it(live, ids, page, ui, out_dir):
    ui.login(page, live.url)
    page.goto(f"{live.url}/compare/?runs={ids['nan-reward']},{ids['plain']}")
    page.wait_for_selector("[data-compare-chart='reward'][data-ready]")
    page.wait_for_timeout(300)
    page.locator("[data-compare-chart='reward']").screenshot(
        path=str(out_dir / "compare_nan.png")
    )
    chart = page.evaluate(
        f"(() => {{ const c = window.__compareMetricCharts.find(c => c.yTitle === 'reward');"
        f" return ({CHART})(c); }})()"
    )
    k = chart["keys"].index(ids["nan-reward"])
    # Both NaN marked at their step (the last one was dropped), titled with the run
    # and the key its line is read from (its trainer's train/reward: the legend names
    # each run's key where they differ).
    marks = _marked_at(chart, ids["nan-reward"], ["3", "7"])
    assert {m["title"] for m in marks} == {
        "nan-reward (train/reward): NaN at step 3",
        "nan-reward (train/reward): NaN at step 7",
    }, marks
    assert "nan-reward (train/reward) \u00b7 NaN at steps 3, 7" in chart["legend"], (
        chart
    )
    assert "nan-reward (train/reward): NaN at steps 3, 7" in (chart["note"] or ""), (
        chart
    )
    # No line through step 3: a gap spans it. The other run's line is whole.
    x3 = chart["x"][0]
    assert any(a <= x3 <= b for a, b in chart["gaps"][k]), chart
    assert chart["gaps"][1 - k] == [], chart
    assert chart["covered"] == [], chart
    # The summary says NaN, as the run page and the runs list do.
    cell = page.locator("[data-summary] [data-not-a-number]")
    assert cell.inner_text() == "NaN"
    assert cell.get_attribute("title") == "the last logged value is not a number"
    page.guard.check()


def test_a_nan_mark_covers_no_other_series_point(live, ids, page, ui, out_dir):
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{ids['cover']}/")
    ui.until(
        page,
        "document.body.dataset.chartsReady && (window.__runCharts || [])"
        ".some(c => c.keys.includes('train/grad_norm') && c.plot)",
    )
    page.wait_for_timeout(300)
    chart = page.evaluate(
        f"(() => {{ const c = window.__runCharts.find(c => c.keys.includes('train/grad_norm'));"
        f" return ({CHART})(c); }})()"
    )
    section = page.locator(
        "[data-chart]", has=page.locator("[data-odd-key='train/grad_norm']")
    )
    section.screenshot(path=str(out_dir / "run_page_nan_mark_room.png"))
    assert set(chart["keys"]) >= {"train/grad_norm", "train/loss"}, chart
    _marked_at(chart, "train/grad_norm", ["3", "7"])
    # loss is highest at step 7, right under the NaN's mark: it stays in view, clear
    # of the mark.
    assert chart["covered"] == [], chart["covered"]
    page.guard.check()


def test_the_runs_list_sparkline_breaks_at_the_nan(live, ids, page, ui, out_dir):
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/")
    row = page.locator(f"[data-run-row='{ids['nan-reward']}']")
    row.wait_for()
    row.locator("svg.spark").screenshot(path=str(out_dir / "spark_nan.png"))
    spark = page.evaluate(
        """(id) => {
      const svg = document.querySelector(`[data-run-row="${id}"] svg.spark`);
      const line = svg.querySelector('.spark-line'), odd = svg.querySelector('.spark-odd');
      const box = line.getBBox();
      return {pieces: line.getAttribute('d').split('M').filter(s => s.trim()).length,
              right: box.x + box.width, ticks: odd ? odd.getAttribute('d').split('M').filter(s => s.trim()).length : 0,
              label: svg.getAttribute('aria-label'), title: svg.querySelector('title')?.textContent};
    }""",
        ids["nan-reward"],
    )
    # Steps 1-2 and 4-6: two pieces, ending at step 6 (5/6 of the width: the last
    # step, 7, is NaN), not one line stretched over both NaN.
    assert spark["pieces"] == 2, spark
    assert abs(spark["right"] - 500 / 6) < 0.5, spark
    assert spark["ticks"] == 2, spark
    assert (
        "NaN at steps 3, 7" in spark["label"] and "NaN at steps 3, 7" in spark["title"]
    )
    whole = page.evaluate(
        """(id) => { const l = document.querySelector(`[data-run-row="${id}"] .spark-line`);
      const b = l.getBBox(); return [l.getAttribute('d').split('M').length - 1, b.x + b.width]; }""",
        ids["plain"],
    )
    assert whole[0] == 1 and abs(whole[1] - 100) < 0.5, whole
    latest = row.locator(".col-latest [data-not-a-number]")
    assert latest.inner_text() == "NaN"
    assert latest.get_attribute("title") == "the last logged value is not a number"
    page.guard.check()
