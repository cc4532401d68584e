"""Layout that only a browser shows: the group browser's trajectory cards show every
value whole at 800 to 1600 px (the value column once spilled past the card and the
next card covered it: "-0.016" for -0.0167, "1" for a length of 13); a trajectory's
page does not scroll sideways at 1280 px (the reward-attribution table's check column
stuck out of its card); the compare page's step axis has whole-number ticks (it read
1, 1.25, 1.5, ... where the run page's charts read 1, 2, 3); tables of runs fit their
box from 700 px up, dropping lower-value columns (the runs list at 800 px hid Env, Owner
and Age in an unmarked sideways scroll); chart cards side by side start level."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
# search: a component named single_search_exit_penalty, the longest of the envs'.
a = seed_run(alice, name='layout fit a', env='search', steps=6, groups=3, group_size=6)
b = seed_run(alice, name='layout fit b', env='search', steps=6, seed=3)
print(json.dumps([str(a.pk), str(b.pk)]))
"""

# Every card: no element in it wider than its box or past the card's right edge, and
# every value's text whole, inside its cell and its card, and on top (not covered by
# the next card) where it ends.
CARDS = """() => {
  const out = {cards: 0, values: 0, tested: [], problems: []};
  // The sticky top bar covers what scrolled under it: no hit test there.
  const top = document.querySelector('.topbar')?.getBoundingClientRect().bottom || 0;
  const name = (e) => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '');
  for (const card of document.querySelectorAll('.rollout')) {
    out.cards++;
    const cr = card.getBoundingClientRect();
    const inner = cr.right - parseFloat(getComputedStyle(card).borderRightWidth);
    const label = card.querySelector('.small')?.textContent.trim() || '?';
    if (card.scrollWidth > card.clientWidth)
      out.problems.push(`${label}: card scrollWidth ${card.scrollWidth} > ${card.clientWidth}`);
    for (const e of card.querySelectorAll('*')) {
      if (e.clientWidth && e.scrollWidth > e.clientWidth)
        out.problems.push(`${label}: ${name(e)} scrollWidth ${e.scrollWidth} > ${e.clientWidth}`);
      const r = e.getBoundingClientRect();
      if (r.width && r.right > inner + 0.5)
        out.problems.push(`${label}: ${name(e)} ends at ${r.right} past the card (${inner})`);
    }
    for (const v of card.querySelectorAll('.r, dd')) {
      out.values++;
      const text = v.textContent.trim();
      const range = document.createRange();
      range.selectNodeContents(v);
      const tr = range.getBoundingClientRect(), vr = v.getBoundingClientRect();
      if (!text || tr.width < 1) { out.problems.push(`${label}: empty value ${name(v)}`); continue; }
      if (tr.left < vr.left - 0.5 || tr.right > vr.right + 0.5)
        out.problems.push(`${label}: '${text}' (${tr.left}..${tr.right}) outside its cell (${vr.left}..${vr.right})`);
      if (tr.right > inner + 0.5)
        out.problems.push(`${label}: '${text}' ends at ${tr.right} past the card (${inner})`);
      const y = (tr.top + tr.bottom) / 2;  // hit-tested where wholly in view
      if (tr.top >= top && tr.bottom <= document.documentElement.clientHeight) {
        out.tested.push(out.values);
        for (const x of [tr.left + 1, tr.right - 1]) {
          const hit = document.elementFromPoint(x, y);
          if (!hit || !card.contains(hit))
            out.problems.push(`${label}: '${text}' covered at (${x}, ${y}) by ${hit ? name(hit) : 'nothing'}`);
        }
      }
    }
  }
  return out;
}"""

# The widest card, so that "fits" is not bought with absurd widths.
WIDEST = "() => Math.max(...[...document.querySelectorAll('.rollout')].map(c => c.getBoundingClientRect().width))"

X_TICKS = """() => (window.__compareCharts || []).map(u => {
  const x = u.axes[0];
  return {splits: x._splits || [], labels: (x._values || []).map(String)};
})"""


@pytest.fixture(scope="module")
def runs(live):
    return live.script(SEED)


@pytest.mark.parametrize("width", [800, 1280, 1600])
def test_trajectory_cards_show_every_value_whole(
    live, browser, runs, ui, out_dir, width
):
    with ui.signed_in(browser, live, width) as page:
        page.goto(f"{live.url}/runs/{runs[0]}/trajectories/")
        page.wait_for_selector(".rollout dd")
        page.screenshot(
            path=str(out_dir / f"group_browser_{width}.png"), full_page=True
        )
        problems, cards, values, tested = [], 0, 0, set()
        # elementFromPoint sees the viewport only: check the cards a screenful at a time.
        height = page.evaluate("document.documentElement.scrollHeight")
        for top in range(0, height, 800):
            page.evaluate(f"window.scrollTo(0, {top})")
            got = page.evaluate(CARDS)
            cards, values = got["cards"], got["values"]
            tested.update(got["tested"])
            problems += [p for p in got["problems"] if p not in problems]
        assert cards >= 6 and values >= cards * 4, (cards, values)
        assert len(tested) == values, f"only {len(tested)} of {values} hit-tested"
        assert problems == [], problems
        # Sized to their content, not stretched across the page.
        assert page.evaluate(WIDEST) <= 420, page.evaluate(WIDEST)
        assert page.evaluate(
            "document.documentElement.scrollWidth <= window.innerWidth"
        )


def test_trajectory_page_does_not_scroll_sideways(live, browser, runs, ui, out_dir):
    with ui.signed_in(browser, live, 1280) as page:
        page.goto(f"{live.url}/runs/{runs[0]}/trajectories/")
        href = page.get_attribute(".rollout", "href")
        page.goto(live.url + href)
        page.wait_for_selector("[data-attribution] table")
        page.screenshot(path=str(out_dir / "trajectory_1280.png"), full_page=True)
        widths = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert widths[0] <= widths[1], widths
        # The attribution table stays inside its card, or scrolls inside a wrapper that does.
        right, card = page.evaluate(
            "() => { const p = document.querySelector('[data-attribution]');"
            " const t = p.querySelector('table');"
            " const box = t.closest('.table-wrap') || t;"
            " return [box.getBoundingClientRect().right, p.getBoundingClientRect().right]; }"
        )
        assert right <= card + 0.5, (right, card)


def test_compare_step_axis_ticks_are_whole_steps(live, browser, runs, ui, out_dir):
    with ui.signed_in(browser, live, 1280) as page:
        page.goto(f"{live.url}/compare/?runs={runs[0]},{runs[1]}")
        page.wait_for_selector("[data-compare-chart][data-ready]")
        ui.until(
            page,
            "(window.__compareCharts || []).length"
            " && window.__compareCharts.every(u => u.axes[0]._values)"
            " && window.__compareCharts.length",
        )
        page.wait_for_timeout(300)
        page.screenshot(path=str(out_dir / "compare_1280.png"), full_page=True)
        ticks = page.evaluate(X_TICKS)
        assert ticks, "no compare chart"
        for axis in ticks:
            assert len(axis["labels"]) >= 2, axis
            assert all(float(v).is_integer() for v in axis["splits"]), axis
            assert all(lbl.strip().lstrip("-").isdigit() for lbl in axis["labels"]), (
                axis
            )


# Runs whose cells are the widest the tables hold: the longest algorithm labels, a
# long hyphenated name, the widest status badge, a group.
WIDE_ROWS = """
from django.contrib.auth import get_user_model
from dashboard.models import Run
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
for i, (name, preset, env, status) in enumerate([
        ('verl-qwen2.5-7b-grpo-gsm8k-lr1e-6', 'grpo', 'search', 'succeeded'),
        ('swarm baseline, seed 3', 'grpo', 'swarm', 'unresponsive'),
        ('calc dapo sweep 12', 'dapo', 'calc', 'failed'),
        ('gspo on search', 'gspo', 'search', 'cancelled'),
        # a sweep's name with no place to break: it once pushed Env off at 760 px
        ('qwen25_7b_instruct_grpo_gsm8k_lr1e6_kl0001_bs256_n16_seed42', 'grpo',
         'calc', 'succeeded')]):
    r = seed_run(alice, name=name, env=env, preset=preset, steps=40, done=6,
                 seed=i, status=status, groups=1, group_size=2)
    Run.objects.filter(pk=r.pk).update(group='sweep-2024-lr' if i % 2 else '')
print(json.dumps('ok'))
"""

# Each table of runs: how far it reaches past its box, and the cells (shown) that end
# past the box's right edge, where nothing says the table scrolls.
TABLES = """() => [...document.querySelectorAll('.table-wrap')].map(w => {
  const right = w.getBoundingClientRect().right;
  const cut = [...w.querySelectorAll('th, td')].filter(c => c.getClientRects().length
    && c.getBoundingClientRect().right > right + 0.5).map(c => c.textContent.trim().slice(0, 30));
  const heads = [...w.querySelectorAll('thead th')].filter(c => c.getClientRects().length)
    .map(c => c.textContent.trim());
  return {over: w.scrollWidth - w.clientWidth, cut, heads};
})"""


@pytest.fixture(scope="module")
def wide_rows(live, runs):
    return live.script(WIDE_ROWS)


@pytest.mark.parametrize("width", [700, 760, 800, 1000, 1280])
def test_tables_of_runs_fit_without_a_hidden_scroll(
    live, browser, wide_rows, ui, out_dir, width
):
    """At 800 px the runs list hid Env, Owner and Age off-screen in a sideways scroll
    with no sign of it ("GRPO (DeepSeekMath)" cut at the edge), and the home page's
    Recent table reached 9 px past its box: lower-value columns go first."""
    with ui.signed_in(browser, live, width) as page:
        for path, name in (("/runs/", "runs_list"), ("/", "home")):
            page.goto(live.url + path)
            page.wait_for_selector("[data-run-row]")
            page.screenshot(path=str(out_dir / f"{name}_{width}.png"), full_page=True)
            tables = page.evaluate(TABLES)
            assert tables, path
            for t in tables:
                assert t["over"] <= 0 and t["cut"] == [], (path, width, t)
            if path == "/runs/":
                heads = tables[0]["heads"]
                # What matters most stays: the run, its status, reward and algorithm.
                for col in ("Name", "Status", "Latest", "Algorithm"):
                    assert any(h.startswith(col) for h in heads), (width, heads)
                if width >= 1280:
                    assert {"Group", "Env", "Owner", "Age"} <= set(heads), heads
                if width >= 760:
                    assert "Env" in heads, heads
        assert page.evaluate(
            "document.documentElement.scrollWidth <= window.innerWidth"
        )


def test_a_table_too_wide_for_its_box_shows_that_it_scrolls(
    live, browser, runs, ui, out_dir
):
    """What still does not fit (a long name without a break) scrolls with a shadow
    on the side it hides."""
    with ui.signed_in(browser, live, 800) as page:
        page.goto(live.url + "/runs/")
        page.wait_for_selector("[data-run-row]")
        layers = page.evaluate(
            "() => { const s = getComputedStyle(document.querySelector('.table-wrap'));"
            " return [s.backgroundImage, s.backgroundAttachment]; }"
        )
        assert layers[0].count("radial-gradient") == 2, layers
        assert layers[1].split(", ").count("local") == 2, layers


CARD_TOPS = """(sel) => [...document.querySelectorAll(sel)].map(e => e.getBoundingClientRect().top)"""


def test_chart_cards_side_by_side_start_level(live, browser, runs, ui, out_dir):
    """The right-hand card of each row started ~10 px lower than the left (the
    tokens page's ".panel + .panel" margin): run page charts, compare's "same task"
    columns."""
    task = live.script(
        "from dashboard.models import Trajectory\n"
        f"print(json.dumps(Trajectory.objects.filter(run_id={runs[0]!r})"
        ".values_list('task_id', flat=True).first()))"
    )
    with ui.signed_in(browser, live, 1280) as page:
        page.goto(f"{live.url}/runs/{runs[0]}/")
        page.wait_for_selector("[data-chart] .uplot")
        page.screenshot(path=str(out_dir / "run_page_cards_1280.png"), full_page=True)
        tops = page.evaluate(CARD_TOPS, "[data-charts] > .panel")
        assert len(tops) >= 4, tops
        rows = {}
        for top in tops:  # cards whose tops are within a card's height share a row
            key = next((r for r in rows if abs(r - top) < 100), top)
            rows.setdefault(key, []).append(top)
        assert any(len(r) >= 2 for r in rows.values()), tops
        for row in rows.values():
            assert max(row) - min(row) <= 0.5, tops
        page.goto(f"{live.url}/compare/task/?runs={runs[0]},{runs[1]}&task={task}")
        page.wait_for_selector("[data-task-column]")
        page.screenshot(path=str(out_dir / "compare_task_1280.png"), full_page=True)
        cols = page.evaluate(CARD_TOPS, "[data-task-column]")
        assert len(cols) == 2 and abs(cols[0] - cols[1]) <= 0.5, cols
