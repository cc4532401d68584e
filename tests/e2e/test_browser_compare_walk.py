"""The compare page as a user walked it (dashboard.pages.compare, static/js/compare.js,
static/js/compare_live.js):

1. three runs, two of them swarm runs of one seed: the tasks those two share, and
   which runs share them, instead of "The runs share no task";
2. a live run followed without a reload (the summary's steps, the charts' lines),
   no request while the tab is hidden, none once no run is live;
3. charts added with "Add chart" kept in the URL: a reload opens them again; unknown
   keys in a shared URL named as text;
4. TRL's ``learning_rate`` charted with our ``lr``, the legend naming each run's key;
5. one colour per run whatever the order of ``?runs=``.

The page's interval (``data-live-every-ms``) is shortened by rewriting the served
HTML, so the test reads the template's attribute as it is."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

POLLS = "Number(document.body.dataset.comparePolls || 0)"
# Headless Chromium's tab is never hidden: the page is told it is, then shown again.
HIDE = "Object.defineProperty(document, 'hidden', {value: true, configurable: true})"
SHOW = "delete document.hidden; document.dispatchEvent(new Event('visibilitychange'))"
STEPS = (
    "document.querySelector('[data-run-row=\"{run}\"] td:nth-child(5)')?.textContent"
)
# Each legend entry of the chart of `key`: [label, colour].
LEGEND = """(key) => [...document.querySelectorAll(
  `[data-compare-chart="${key}"] .u-legend .u-series`)].slice(1).map(s => [
  s.querySelector('.u-label').textContent,
  getComputedStyle(s.querySelector('.u-marker')).borderLeftColor])"""

SEED = """
from django.contrib.auth import get_user_model
from django.db.models import F, Value
from django.db.models.functions import Concat
from dashboard.ingest import writer
from dashboard.models import Trajectory
from dashboard.runs import external
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
a = seed_run(alice, name='swarm-a', env='swarm', steps=3, groups=4)
b = seed_run(alice, name='swarm-b', env='swarm', steps=3, groups=4, seed=1)
c = seed_run(alice, name='calc-c', env='calc', preset='grpo', steps=3, groups=3)
Trajectory.objects.filter(run=c).update(task_id=Concat(Value('calc-'), F('group')))
writer.insert_metrics(a.pk, {(s, 'lr'): 1e-5 * s for s in (1, 2, 3)})
trl = external.do_create_external_run(
    alice, name='trl-live', framework='trl',
    config={'steps': 200, 'learning_rate': 2e-6, 'num_generations': 8},
)
external.do_ingest_events(trl, [
    {'type': 'step', 'step': s, 'metrics': {'reward': s / 200, 'learning_rate': 2e-6}}
    for s in range(1, 85)
])
print(json.dumps({'a': str(a.pk), 'b': str(b.pk), 'c': str(c.pk), 'trl': str(trl.pk)}))
"""

SEND = """
from dashboard.models import Run
from dashboard.runs import external
trl = Run.objects.get(pk={run!r})
external.do_ingest_events(trl, [
    {{'type': 'step', 'step': s, 'metrics': {{'reward': s / 200, 'learning_rate': 2e-6}}}}
    for s in range({lo}, {hi})
])
print(json.dumps('ok'))
"""

FINISH = """
from dashboard.models import Run
from dashboard.runs import external
external.do_finish_external_run(Run.objects.get(pk={run!r}), 'succeeded')
print(json.dumps('ok'))
"""


@pytest.fixture(scope="module")
def runs(live):
    return live.script(SEED)


def faster(page, base: str) -> None:
    """Compare (and its summary) served with a 0.5 s interval instead of 5 s."""

    def handle(route):
        try:
            resp = route.fetch()
            body = resp.text().replace(
                'data-live-every-ms="5000"', 'data-live-every-ms="0500"'
            )
            route.fulfill(response=resp, body=body)
        except Exception:  # the page closed while a request was under way
            pass

    page.context.route(lambda url: url.startswith(base + "/compare/"), handle)


def test_three_runs_show_the_tasks_two_of_them_share(live, runs, page, shots, ui):
    ui.login(page, live.url)
    page.goto(f"{live.url}/compare/?runs={runs['c']},{runs['b']},{runs['a']}")
    groups = page.locator("[data-task-groups]")
    assert "swarm-b and swarm-a share 12 tasks; calc-c sampled none of them" in (
        groups.inner_text()
    )
    assert "share no task" not in page.inner_text("body")
    heads = page.eval_on_selector_all(
        "[data-side-by-side] h3 a:first-child", "as => as.map(a => a.textContent)"
    )
    assert heads == ["swarm-b", "swarm-a"]
    page.locator("[data-task-groups]").scroll_into_view_if_needed()
    ui.shot(page, shots, "compare_walk_tasks_shared_by_two", full=True)
    # A task of the pair, picked: the page shows it for the pair.
    page.select_option("#task-pick", "task-2-1")
    page.wait_for_url(lambda u: "task=task-2-1" in u)
    assert "task-2-1: sampled by swarm-b, swarm-a; not by calc-c." in page.inner_text(
        "[data-task-runs]"
    )
    page.guard.check()


def test_a_live_run_is_followed_and_charts_stay_in_the_url(live, runs, page, shots, ui):
    base = live.url
    trl, a = runs["trl"], runs["a"]
    ui.login(page, base)
    faster(page, base)
    page.goto(f"{base}/compare/?runs={trl},{a}")
    page.evaluate("window.__noReload = true")
    page.wait_for_selector("[data-compare-chart='reward'][data-ready]")
    assert page.evaluate(STEPS.format(run=trl)) == "84/200"

    # 4. learning_rate with our lr, each line naming its key; the metric list offers
    # the meaning once, by our name.
    offered = page.eval_on_selector_all(
        "[data-compare-key] option", "os => os.map(o => o.value)"
    )
    assert "lr" in offered and "learning_rate" not in offered
    page.select_option("[data-compare-key]", "lr")
    page.click("[data-add-chart]")
    page.wait_for_selector("[data-compare-chart='lr'][data-ready]")
    legend = dict(page.evaluate(LEGEND, "lr"))
    assert set(legend) == {"trl-live (learning_rate)", "swarm-a (lr)"}, legend
    chart = "window.__compareMetricCharts.find(c => c.yTitle === '{key}')"
    present = page.evaluate(f"{chart.format(key='lr')}.present")
    assert present == [True, True]
    assert "trl-live: learning_rate" in page.inner_text(
        "[data-compare-chart='lr'] [data-chart-sources]"
    )
    # 3. kept in the URL, and in the task form.
    assert page.url.endswith("&charts=reward,lr")
    ui.shot(page, shots, "compare_walk_lr_lined_up")

    # 2. It trains on: the summary and the reward line follow it.
    live.script(SEND.format(run=trl, lo=85, hi=93))
    ui.until(page, f"{STEPS.format(run=trl)} === '92/200'", 15)
    reward = chart.format(key="reward")
    ui.until(page, f"{reward}.points.has(92)", 10)
    assert page.evaluate("document.body.dataset.compareLive") == "on"
    ui.shot(page, shots, "compare_walk_live_step_92")

    # A hidden tab asks nothing; shown again, it asks at once.
    page.evaluate(HIDE)
    page.wait_for_timeout(700)
    hidden = page.evaluate(POLLS)
    page.wait_for_timeout(1500)
    assert page.evaluate(POLLS) == hidden
    page.evaluate(SHOW)
    ui.until(page, f"{POLLS} > {hidden}", 3)

    # It ends: the last refresh shows it, then no more requests.
    live.script(FINISH.format(run=trl))
    ui.until(page, "document.body.dataset.compareLive === 'off'", 10)
    assert "succeeded" in page.inner_text(f"[data-run-row='{trl}']")
    polls = page.evaluate(POLLS)
    page.wait_for_timeout(2000)
    assert page.evaluate(POLLS) == polls
    assert page.evaluate("window.__noReload") is True

    # 3. A reload (a shared link) opens the same charts.
    page.reload()
    page.wait_for_selector("[data-compare-chart='lr'][data-ready]")
    shown = page.eval_on_selector_all(
        "[data-compare-chart]", "cs => cs.map(c => c.dataset.compareChart)"
    )
    assert shown == ["reward", "lr"]
    page.click("[data-compare-chart='reward'] h3 button")
    assert "charts=lr" in page.url and "reward" not in page.url.split("charts=")[1]
    page.guard.check()


def test_unknown_chart_keys_are_named_as_text(live, runs, page, ui):
    ui.login(page, live.url)
    hostile = "<img src=x onerror=alert(1)>"
    page.goto(
        f"{live.url}/compare/?runs={runs['a']},{runs['b']}&charts=lr,nope,"
        + hostile.replace(" ", "%20")
    )
    page.wait_for_selector("[data-compare-chart='lr'][data-ready]")
    notice = page.inner_text("[data-chart-notice]")
    assert notice == f"Not charted: nope, {hostile} (no selected run logged them)."
    assert page.locator("img[src=x]").count() == 0
    assert page.url.endswith("&charts=lr")  # the URL as shown
    page.guard.check()


def test_a_run_keeps_its_colour_whatever_the_order(live, runs, page, shots, ui):
    ui.login(page, live.url)
    seen = []
    for order in ("a,b,c", "c,b,a", "b,a"):
        ids = ",".join(runs[x] for x in order.split(","))
        page.goto(f"{live.url}/compare/?runs={ids}")
        page.wait_for_selector("[data-compare-chart='reward'][data-ready]")
        seen.append(dict(page.evaluate(LEGEND, "reward")))
        if order == "c,b,a":
            ui.shot(page, shots, "compare_walk_colours_cba", full=False)
    abc, cba, ba = seen
    assert abc == cba, (abc, cba)
    assert ba == {k: v for k, v in abc.items() if k != "calc-c"}
    assert len(set(abc.values())) == 3
    page.guard.check()
