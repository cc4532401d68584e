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
def hostile(step, group, index):
    subs = [{'subtask': HOSTILE, 'steps': 3, 'success': True},
            {'subtask': 'b', 'steps': 1, 'success': True}]
    CriticalPath.objects.create(run=run, step=step, group=group, index=index,
        stages=[{'orchestrator_steps': 1, 'subagents': subs}], critical_steps=4,
        total_steps=5, path=[0])
for step in (1, 2, 3):
    for group in (0, 1):
        for index in (0, 1):
            if step == 2 and (group, index) == (1, 1):
                parallel(step, group, index)
            elif step == 1 and (group, index) == (0, 1):
                hostile(step, group, index)
            else:
                serial(step, group, index)
print(json.dumps(str(run.pk)))
"""
HOSTILE = '<img src=x onerror="alert(1)">'
SEED = f"HOSTILE = {HOSTILE!r}\n" + SEED

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
    assert selected[0] == "1" and selected[1].split() == ["1", "shown"]
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


# Each lane label: its text, box, font size, whether it is cut off, and the vertical
# centres of the bars drawn in its lane.
LANES = """() => {
  const svg = document.querySelector('svg.gantt').getBoundingClientRect();
  return [...document.querySelectorAll('[data-lanes] [data-lane]')].map(l => {
    const r = l.getBoundingClientRect();
    const bars = [...document.querySelectorAll(
      `svg.gantt rect[data-lane="${l.dataset.lane}"]`)].map(b => {
        const br = b.getBoundingClientRect(); return br.top + br.height / 2; });
    return {text: l.textContent, top: r.top, bottom: r.bottom, right: r.right,
            cut: l.scrollWidth > l.clientWidth + 1, svgLeft: svg.left, bars,
            font: parseFloat(getComputedStyle(l).fontSize),
            shown: r.width > 0 && getComputedStyle(l).visibility !== 'hidden'};
  });
}"""

SUB_AGENT_BARS = """() => [...document.querySelectorAll('svg.gantt rect.bar:not(.orch)')]
  .map(r => { const cs = getComputedStyle(r);
    return {crit: r.hasAttribute('data-critical'), fill: cs.fill, stroke: cs.stroke}; })"""


def check_lanes(page, labels):
    lanes = page.evaluate(LANES)
    assert [lane["text"] for lane in lanes] == labels
    for lane in lanes:
        assert lane["shown"] and not lane["cut"] and lane["font"] >= 11, lane
        assert lane["right"] <= lane["svgLeft"], lane  # beside the chart, not over it
        assert lane["bars"], lane
        assert all(lane["top"] <= y <= lane["bottom"] for y in lane["bars"]), lane


def test_the_page_says_what_it_shows_and_labels_every_lane(live, page, shots, ui):
    """Issue: the page opened on a rollout without saying why, and its lanes had no
    labels. It now names the rollout and the rule that chose it, marks it in the list,
    labels each lane (orchestrator, sub-agent k) beside the chart, numbers the stages
    and writes each sub-agent's subtask in its bar, at 1400 and at 800 px."""
    run = live.script(SEED)
    ui.login(page, live.url)
    for width in (1400, 800):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live.url}/runs/{run}/critical-path/")
        said = " ".join(page.text_content("[data-shown-pick]").split())
        assert said.startswith(
            "Showing step 2, group 1, rollout 1: chosen by default as the rollout of "
            "this step whose sub-agents, run in parallel, saved the most steps "
            "(3 of its 9)."
        ), said
        assert page.locator("[data-shown-row] .shown-tag").is_visible()
        check_lanes(page, ["orchestrator", "sub-agent 0", "sub-agent 1", "sub-agent 2"])
        assert page.locator("svg.gantt [data-stage]").all_text_contents() == ["0", "1"]
        names = page.locator("svg.gantt .bar-label text").all_text_contents()
        assert names == ["s0", "s1", "s2"]
        assert page.locator("svg.gantt .bar-label.crit text").text_content() == "s0"
        # The stage's slowest sub-agent differs from the others in colour and outline.
        bars = page.evaluate(SUB_AGENT_BARS)
        crit = [b for b in bars if b["crit"]]
        assert len(crit) == 1 and crit[0]["stroke"] not in ("none", "")
        assert all(b["fill"] != crit[0]["fill"] for b in bars if not b["crit"]), bars
        legend = page.text_content("[data-legend]")
        assert "sub-agent on the critical path (its stage's slowest)" in legend
        doc = page.evaluate("document.documentElement.scrollWidth")
        assert doc <= width, doc
        ui.shot(page, shots, f"critical_path_labels_{width}")

    # Picking another rollout draws it and says so; the list marks it.
    page.click("[data-nav-item]:nth-child(2) [data-nav-link]")
    page.wait_for_url("**index=1")
    said = " ".join(page.text_content("[data-shown-pick]").split())
    assert "Showing step 2, group 0, rollout 1: the rollout you chose." in said
    shown = page.locator("[data-shown-row] td").all_text_contents()
    assert shown[0] == "0" and shown[1].split() == ["1", "shown"]
    check_lanes(page, ["orchestrator"])

    # A subtask the model named with markup is text, in its bar and its tooltip.
    page.goto(f"{live.url}/runs/{run}/critical-path/?step=1")
    said = " ".join(page.text_content("[data-shown-pick]").split())
    assert said.startswith("Showing step 1, group 0, rollout 1: chosen by default")
    assert page.locator("svg.gantt .bar-label.crit text").text_content() == HOSTILE
    assert (
        HOSTILE
        in page.locator(
            "svg.gantt rect[data-critical][data-lane='1'] title"
        ).text_content()
    )
    assert page.locator("img").count() == 0
    ui.shot(page, shots, "critical_path_labels_hostile")
    page.emulate_media(color_scheme="dark")
    ui.shot(page, shots, "critical_path_labels_dark")
    page.guard.check()
