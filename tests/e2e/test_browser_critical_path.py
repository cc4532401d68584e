"""The critical-path page (issue 11, item 7): opened without a step it shows a step
where sub-agents ran in parallel and, in it, a rollout that has them; on a step
without any it says why nothing is parallel and where to look; every legend colour is
a colour of the chart."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import CriticalPath, Run
from dashboard.pages.forms import default_config
alice = get_user_model().objects.get(username='alice')
run = Run.objects.create(name='cp', owner=alice, config=default_config('swarm'),
                         status='succeeded', last_step=3)
def serial(step, group, index):
    stages = [{'orchestrator_steps': 3, 'subagents': []}]
    CriticalPath.objects.create(run=run, step=step, group=group, index=index,
        stages=stages, critical_steps=3, total_steps=3, path=[None])
def parallel(step, group, index):
    subs = [{'subtask': 's0', 'steps': 4, 'success': True},
            {'subtask': 's1', 'steps': 2, 'success': True},
            {'subtask': 's2', 'steps': 1, 'success': False}]
    stages = [{'orchestrator_steps': 1, 'subagents': subs},
              {'orchestrator_steps': 1, 'subagents': []}]
    CriticalPath.objects.create(run=run, step=step, group=group, index=index,
        stages=stages, critical_steps=6, total_steps=9, path=[0, None])
for step in (1, 2, 3):
    for group in (0, 1):
        for index in (0, 1):
            if step == 2 and (group, index) == (1, 1):
                parallel(step, group, index)
            else:
                serial(step, group, index)
print(json.dumps(str(run.pk)))
"""

LEGEND_MATCHES_BARS = """() => {
  const fills = new Set([...document.querySelectorAll('svg.gantt rect')]
    .map(r => getComputedStyle(r).fill));
  return [...document.querySelectorAll('[data-swatch]')].map(s => {
    const cs = getComputedStyle(s);
    const colour = s.dataset.swatch === 'failed' ? null : cs.backgroundColor;
    return [s.dataset.swatch, colour === null || fills.has(colour)];
  });
}"""


def test_the_critical_path_page_opens_where_there_is_something_parallel(
    live, page, shots, ui
):
    run = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run}/critical-path/")
    # The latest step is 3 (all serial): the page opens on step 2, rollout (1, 1).
    assert "at step 2" in page.text_content("h1")
    selected = page.locator("tr.selected td").all_text_contents()
    assert selected[:2] == ["1", "1"]
    assert page.locator("svg.gantt rect").count() == 5  # 2 orchestrator + 3 sub-agents
    assert page.locator("[data-nothing-parallel]").count() == 0
    legend = page.evaluate(LEGEND_MATCHES_BARS)
    assert [k for k, _ in legend] == ["orch crit", "crit", "par", "failed"]
    assert all(ok for _, ok in legend), legend
    ui.shot(page, shots, "critical_path_parallel")

    page.goto(f"{live.url}/runs/{run}/critical-path/?step=3")
    note = page.text_content("[data-nothing-parallel]")
    assert "spawned no sub-agents" in note and "No rollout of step 3" in note
    assert page.get_attribute("[data-parallel-step]", "href") == "?step=2"
    legend = page.evaluate(LEGEND_MATCHES_BARS)
    assert [k for k, _ in legend] == ["orch crit"] and legend[0][1]
    ui.shot(page, shots, "critical_path_serial_step")

    # On a phone the step labels and lanes keep their size (a 1000-unit viewBox
    # drew them 4 px tall at 390 px).
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live.url}/runs/{run}/critical-path/?step=2&group=1&index=1")
    sizes = page.evaluate(
        "() => ({text: Math.min(...[...document.querySelectorAll('svg.gantt text')]"
        ".map(t => t.getBoundingClientRect().height)),"
        " lane: Math.min(...[...document.querySelectorAll('svg.gantt rect')]"
        ".map(r => r.getBoundingClientRect().height)),"
        " svg: document.querySelector('svg.gantt').getBoundingClientRect().width,"
        " doc: document.documentElement.scrollWidth})"
    )
    assert sizes["text"] >= 11 and sizes["lane"] >= 17, sizes
    assert sizes["doc"] <= 390, sizes  # nothing wider than the screen
    ui.shot(page, shots, "critical_path_phone")
    page.guard.check()
