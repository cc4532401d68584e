"""Charts explain themselves (issue 22.10b, 22.11), as a newcomer with a TRL run and a
native run meets them: a line of help and axis titles on every chart, TRL's loss and
grad norm (40x-4000x apart) on two y axes, an end-of-training table instead of
one-point series, a text-only completion without token colours, a task history of a
single step drawing its point, and a chart read with the keyboard alone."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import Run
from dashboard.pages.forms import default_config
from dashboard.runs import external
from tests.fixtures.seed import write_events
from trainer.importers.shapes import text_trajectory
alice = get_user_model().objects.get(username='alice')
trl = external.do_create_external_run(alice, name='trl-grpo', framework='trl',
    config={'learning_rate': 1e-6, 'num_generations': 4, 'beta': 0.04,
            'report_to': ['none'], 'seed': 42})
def trl_events():
    for s in range(1, 11):
        m = {'loss': 0.002 * s, 'grad_norm': 40.0 + 9 * (s % 4), 'reward': 0.1 * s,
             'reward_std': 0.3, 'frac_reward_zero_std': 0.25, 'kl': 0.001 * s}
        if s == 10:
            m.update({'train_runtime': 812.5, 'train_loss': 0.011,
                      'train_samples_per_second': 3.9, 'train_steps_per_second': 0.12})
        yield {'type': 'step', 'step': s, 'metrics': m}
        for i, text in enumerate(['4', '5', '4', 'four']):
            yield text_trajectory(step=s, group=0, index=i, prompt='2+2?',
                completion=text, reward=float(text == '4'), components={'acc': 1.0},
                advantage=0.0)
trl.last_step = write_events(trl, trl_events())
trl.status = 'succeeded'
trl.save()
native = Run.objects.create(name='native', owner=alice, config=default_config('calc'),
                            status='succeeded')
def native_events():
    for s in range(1, 9):
        yield {'type': 'step', 'step': s, 'metrics': {'reward': 0.05 * s,
               'entropy': 2.0 - 0.1 * s, 'policy_loss': 0.01, 'grad_norm': 0.5,
               'rollout/logprob_diff': 2e-7, 'rollout/ratio_mean': 1.0,
               'rollout/ratio_min': 0.999, 'rollout/ratio_max': 1.001}}
    yield {'type': 'trajectory', 'step': 4, 'group': 0, 'index': 0,
           'task_id': 'lonely', 'reward': 1.0, 'advantage': 0.5,
           'steps': [{'action': 'answer 4'}]}
native.last_step = write_events(native, native_events())
native.save()
print(json.dumps([str(trl.pk), str(native.pk)]))
"""

CHART = """(id) => {
  const c = window.__runCharts.find(c => c.el.closest('[data-chart]')?.dataset.chart === id);
  const u = c.plot;
  return {axes: u.axes.map(a => a.label), scales: u.series.slice(1).map(s => s.scale),
          labels: u.series.slice(1).map(s => s.label),
          focusable: c.el.tabIndex === 0, name: c.el.getAttribute('aria-label')};
}"""

# Coloured pixels (the series' palette; grid and text are grey) on the task chart.
INK = """() => {
  const cv = document.querySelector('[data-chart=task] canvas');
  const d = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (d[i+3] > 200 && Math.max(d[i], d[i+1], d[i+2]) - Math.min(d[i], d[i+1], d[i+2]) > 80) n++;
  return n;
}"""


def _charts_ready(page, ui, ids):
    ui.until(
        page,
        f"window.__runCharts && {ids!r}.every(id => window.__runCharts.some(c =>"
        " c.plot && c.el.closest('[data-chart]').dataset.chart === id))",
        30,
    )
    page.wait_for_timeout(300)


def test_a_trl_run_page_explains_its_charts(live, page, shots, ui):
    trl, _native = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{trl}/")
    _charts_ready(page, ui, ["loss", "dropped", "reward"])
    ui.shot(page, shots, "explain_01_trl_run")
    help_line = page.locator("[data-chart=dropped] [data-chart-help]").inner_text()
    assert "no learning signal" in help_line
    loss = page.evaluate(CHART, "loss")
    assert loss["axes"][0] == "training step", loss
    # loss ~0.01, grad_norm ~50 (policy_loss: not logged by TRL, no data)
    assert loss["scales"] == ["y", "y", "y2"], loss
    assert loss["axes"][1:] == ["loss", "grad_norm (right axis)"], loss
    assert "grad_norm (right axis)" in loss["labels"]
    summary = page.locator("[data-train-summary]")
    assert "812.5" in summary.inner_text()
    charted = page.evaluate("window.__runCharts.flatMap(c => c.keys)")
    assert "train_runtime" not in charted
    groups = page.goto(f"{live.url}/runs/{trl}/trajectories/?step=3")
    assert groups.ok
    head = page.locator("section[aria-label='group 0'] [data-diverge]").inner_text()
    assert head == "3 distinct completions of 4"
    ui.shot(page, shots, "explain_02_trl_groups")
    # One of its completions: text only, so nothing to colour tokens by, and it says so
    assert page.goto(f"{live.url}/runs/{trl}/trajectories/3/0/3/").ok
    assert page.locator("[data-colour-by]").count() == 0
    assert "the trainer sent no tokens" in page.locator("[data-text-only]").inner_text()
    assert page.get_by_text("four", exact=True).first.is_visible()
    ui.shot(page, shots, "explain_02b_trl_text_only")


def test_charts_are_read_with_the_keyboard(live, page, shots, ui):
    _trl, native = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{native}/")
    _charts_ready(page, ui, ["reward", "entropy", "sampler"])
    # Three series on the right axis: their title fits the chart's height (their
    # names joined were cut off at both ends), the legend names each.
    sampler = page.evaluate(CHART, "sampler")
    assert sampler["axes"][1:] == [
        "rollout/logprob_diff",
        "rollout/ratio_* (right axis)",
    ], sampler
    assert "rollout/ratio_min (right axis)" in sampler["labels"]
    page.locator("[data-chart=sampler]").scroll_into_view_if_needed()
    ui.shot(page, shots, "explain_03_sampler_axes")
    reward = page.evaluate(CHART, "reward")
    assert reward["focusable"] and reward["name"].startswith("Reward: "), reward
    assert reward["axes"] == ["training step", "reward"], reward
    plot = page.locator("[data-chart=reward] [data-plot]")
    plot.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    readout = page.locator("[data-chart=reward] [data-readout]")
    assert readout.inner_text().startswith("step 2: reward 0.1"), readout.inner_text()
    page.keyboard.press("End")
    assert readout.inner_text().startswith("step 8: reward 0.4")
    ui.shot(page, shots, "explain_03_native_keyboard")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/runs/{native}/trajectories/?step=4")


def test_a_task_history_of_one_step_draws_its_point(live, page, shots, ui):
    _trl, native = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{native}/tasks/lonely/")
    page.wait_for_selector("[data-chart=task][data-points='1'] canvas")
    page.wait_for_timeout(300)
    ui.shot(page, shots, "explain_04_task_one_point")
    assert page.evaluate(INK) > 10  # the point's dot, not an empty plot
    assert page.locator("[data-chart=task] [data-chart-help]").inner_text()
    axes = page.evaluate(
        "() => window.__taskCharts?.[0]?.plot.axes.map(a => a.label) || null"
    )
    assert axes == ["training step", "reward / advantage"], axes


COMPARE_SEED = """
import json as _json
from django.contrib.auth import get_user_model
from dashboard.runs import external
from trl import GRPOConfig
alice = get_user_model().objects.get(username='alice')
args = GRPOConfig(output_dir='/tmp/unused-grpo', learning_rate=1e-6, num_generations=8,
                  beta=0.04, report_to='none', use_cpu=True, bf16=False)
trl = external.do_create_external_run(alice, name='trl-full-config', framework='trl',
                                      config=_json.loads(args.to_json_string()))
print(json.dumps(str(trl.pk)))
"""


def test_compare_a_native_and_a_trl_run_lines_up_their_settings(live, page, shots, ui):
    pytest.importorskip("trl")
    _trl, native = live.script(SEED)
    trl = live.script(COMPARE_SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/compare/?runs={native},{trl}")
    ui.shot(page, shots, "explain_05_compare_native_trl")
    matched = page.locator("[data-config-matched]")
    assert "learning rate" in matched.inner_text()
    assert "num_generations" in matched.inner_text()
    other = page.locator("[data-config-other]")
    assert other.get_attribute("open") is None  # folded
    # Its own summary (a long value in its table opens from a <summary> of its own).
    assert "other keys" in page.locator("[data-config-other] > summary").inner_text()
