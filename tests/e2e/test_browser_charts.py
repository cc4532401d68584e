"""Chart rough edges only a browser shows (issue 11, item 12): a throughput axis at
10,000 fits, values under 1e-3 read in scientific notation, near-equal ticks are told apart, all-zero clip ratios sit on 0..1 (not
0..100), ratios equal to 1 up to float noise get an axis (they once hung uPlot's tick
loop: "Invalid array length"), the KL chart of a run without a KL penalty says none
will come, and config paths in a diff break at dots, not inside names."""

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
assert cfg['algorithm']['kl_beta'] == 0.0
run = Run.objects.create(name='charts', owner=alice, config=cfg, status='succeeded')
def events():
    for s in range(1, 41):
        yield {'type': 'step', 'step': s, 'metrics': {
            'reward': 0.01 * s, 'perf/tokens_per_s': 9000.0 + 50 * s,
            'entropy': 3.97801 + 0.000002 * s,
            'clip_ratio/low_mean': 0.0, 'clip_ratio/high_mean': 0.0,
            'clip_ratio/region_mean': 0.0,
            # Sampler and learner agree to float noise: ratios 1 +- 1e-6 once
            # hung uPlot's tick loop (its smallest step added nothing to 1.0).
            'rollout/logprob_diff': 2e-7 + 1e-8 * (s % 7),
            'rollout/ratio_mean': 0.9999999973509053,
            'rollout/ratio_min': 0.9999992847445185,
            'rollout/ratio_max': 1.000000476837272}}
run.last_step = write_events(run, events())
run.save()
cfg2 = dict(cfg, reward=dict(cfg['reward'], judge_aggregate='min'))
other = Run.objects.create(name='charts 2', owner=alice, config=cfg2, status='succeeded')
print(json.dumps([str(run.pk), str(other.pk)]))
"""

AXIS = """(id) => {
  const c = window.__runCharts.find(c => c.el.closest('[data-chart]')?.dataset.chart === id);
  const u = c.plot, y = u.axes[1];
  const labels = y._values || y.values(u, y._splits);
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = '12px system-ui, -apple-system, sans-serif';
  const widest = Math.max(...labels.map(l => ctx.measureText(l).width));
  return {labels, min: u.scales.y.min, max: u.scales.y.max, size: y._size, widest};
}"""


def test_chart_axes_and_empty_charts_tell_the_truth(live, page, shots, ui):
    run, other = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run}/")
    ui.until(
        page,
        "window.__runCharts && ['throughput', 'entropy', 'clip'].every(id =>"
        " window.__runCharts.some(c => c.plot &&"
        " c.el.closest('[data-chart]').dataset.chart === id))",
        30,
    )
    page.wait_for_timeout(300)
    thr = page.evaluate(AXIS, "throughput")
    assert thr["labels"] and all(lbl.endswith("k") for lbl in thr["labels"]), thr
    assert max(len(lbl) for lbl in thr["labels"]) <= 6, thr

    ent = page.evaluate(AXIS, "entropy")
    assert len(set(ent["labels"])) == len(ent["labels"]), ent  # no "3.978, 3.978"
    for axis in (thr, ent):  # every label fits its axis
        assert axis["widest"] + 8 <= axis["size"], axis

    # Tiny values in scientific notation ("0.00000030" before), told apart.
    tiny = page.evaluate(AXIS, "sampler")
    labels = [lbl for lbl in tiny["labels"] if lbl]
    assert labels and all("e\u2212" in lbl or lbl == "0" for lbl in labels), tiny
    assert len(set(labels)) == len(labels) and max(map(len, labels)) <= 7, tiny

    clip = page.evaluate(AXIS, "clip")
    assert (clip["min"], clip["max"]) == (0, 1), clip

    kl = page.text_content("[data-chart=kl] [data-nodata]")
    assert "kl_beta = 0" in kl and page.is_visible("[data-chart=kl] [data-nodata]")
    ui.shot(page, shots, "charts_axes")

    page.goto(f"{live.url}/compare/?runs={run},{other}")
    cell = page.locator("[data-config-diff] tbody td:first-child").first
    assert cell.text_content() == "reward.judge_aggregate"
    assert cell.locator("wbr").count() == 1
    assert cell.evaluate("td => getComputedStyle(td).wordBreak") == "normal"
    page.guard.check()
