"""Three display bugs a newcomer met walking the app in Chromium, at 1400 and 800 px:

1. compare's config differences: one long value (a rubric's description) took the
   table's width and squeezed the other runs' columns to a few characters a line,
   and a value cut short ("...") could not be read whole. Now every value column
   keeps a readable width, a long value shows its start with a way to open it whole
   (``<details>``, the whole value also its summary's ``title``), all of it text;
2. the group browser laid a group of 8 cards out 7 + 1 at 1400 px: now a group's
   rows are as even as its cards allow (8: 4 + 4 or one row), no card left alone on
   a row for groups of 2 to 16, the cards grown (up to 1.6 times their natural
   width) to use the row rather than leave its right half empty;
3. the new-run form's preset picker cut its label ("DAPO (clip-higher, dyn"): now
   the whole label of every preset shows in it."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTHS = [1400, 800]
HOSTILE = "<img src=x onerror=alert(1)>"
LONG = (
    "Award a point when the final answer is given in the required format, "
    "after the tool was called at least once; "
) * 6 + f"{HOSTILE} see https://example.org/{'a' * 150}"
DESCRIPTION = "reward.judges.rules.rubric.answer_given.description"

SEED = f"""
import copy
from django.contrib.auth import get_user_model
from dashboard.models import Run
from tests.fixtures.seed import seed_run, valid_config
alice = get_user_model().objects.get(username='alice')
a, b, c = (valid_config('calc', 'grpo', 4, name=f'cfg-{{x}}') for x in 'abc')
a['reward']['judges'][0]['rubric'][0]['description'] = {LONG!r}
a['model']['path'] = 'Qwen/Qwen2.5-0.5B-Instruct'
b['optim']['lr'], c['optim']['lr'] = 0.0003, 0.0001
# A judge only one run has: one row, its whole sub-tree in one cell (once cut at 160).
strict = copy.deepcopy(b['reward']['judges'][0])
strict['name'] = 'strict'
for d in strict['rubric']:
    d['description'] = 'checked strictly, with no partial credit for near misses'
b['reward']['judges'].append(strict)
ids = {{'compare': []}}
for cfg in (a, b, c):
    r = Run.objects.create(owner=alice, name=cfg['name'], config=cfg, status='succeeded')
    ids['compare'].append(str(r.pk))
# Groups of 2 to 16 rollouts (one group a run, one step).
for n in range(2, 17):
    r = seed_run(alice, name=f'groups of {{n}}', env='search', steps=1, groups=1,
                 group_size=n, seed=n)
    ids[n] = str(r.pk)
# Narrower cards (three components): 7 of them a row at 1400 px, as the newcomer met it.
for n in (8, 15):
    r = seed_run(alice, name=f'calc groups of {{n}}', env='calc', steps=1, groups=1,
                 group_size=n, seed=n)
    ids[f'calc{{n}}'] = str(r.pk)
print(json.dumps(ids))
"""


@pytest.fixture(scope="module")
def seeded(live):
    return live.script(SEED)


# --- 1. compare's config differences ------------------------------------------------

DIFF = """() => {
  const t = document.querySelector('[data-config-diff]');
  const w = t.closest('.table-wrap');
  const heads = [...t.querySelectorAll('thead th')];
  const rows = [...t.querySelectorAll('tbody tr')].map(tr => {
    const [field, ...cells] = tr.children;
    return {field: field.textContent, cells: cells.map(td => {
      const lh = parseFloat(getComputedStyle(td).lineHeight) || 17;
      // What the cell shows (a closed <details>' content is laid out unseen).
      const range = document.createRange();
      range.selectNodeContents(td);
      const shown = td.querySelector('.config-value') || range;
      return {text: td.innerText.trim(), width: td.getBoundingClientRect().width,
              lines: Math.round(shown.getBoundingClientRect().height / lh)};
    })};
  });
  return {table: t.getBoundingClientRect().width, wrap: w.clientWidth,
          over: w.scrollWidth - w.clientWidth,
          columns: heads.slice(1).map(h => h.getBoundingClientRect().width),
          field: heads[0].getBoundingClientRect().width, rows,
          page: document.documentElement.scrollWidth - window.innerWidth};
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_a_long_config_value_leaves_the_other_columns_readable(
    live, browser, seeded, ui, shots, width
):
    with ui.signed_in(browser, live, width) as page:
        page.goto(f"{live.url}/compare/?runs={','.join(seeded['compare'])}")
        table = page.locator("[data-config-diff]")
        table.scroll_into_view_if_needed()
        got = page.evaluate(DIFF)
        table.screenshot(path=str(shots / f"newcomer_config_diff_{width}.png"))
        rows = {r["field"]: r["cells"] for r in got["rows"]}
        assert set(rows) >= {"name", "model.path", "optim.lr", DESCRIPTION}, rows
        # Every run's column at least ~14 characters of its monospace values wide
        # (they were squeezed to 35-60 px beside the description), the long one no
        # more than half the table.
        assert min(got["columns"]) >= 100, got["columns"]
        assert max(got["columns"]) <= 0.5 * got["table"], (got["columns"], got["table"])
        # Short values on one line: "Qwen/Qwen2.5-0.5B-Instruct", "0.0003", "cfg-b".
        for field in ("name", "optim.lr"):
            assert all(c["lines"] == 1 for c in rows[field]), (field, rows[field])
        assert rows["model.path"][0]["lines"] <= 2, rows["model.path"]
        # The description: its start, a few lines tall, not 860 characters of it.
        long_cell = rows[DESCRIPTION][0]
        assert long_cell["lines"] <= 4, long_cell
        assert long_cell["text"].startswith("Award a point when"), long_cell
        assert got["page"] <= 0, got["page"]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_cut_config_value_opens_whole(live, browser, seeded, ui, shots, width):
    with ui.signed_in(browser, live, width) as page:
        page.goto(f"{live.url}/compare/?runs={','.join(seeded['compare'])}")
        row = page.locator(
            "[data-config-diff] tbody tr", has_text="rules.rubric.answer_given"
        )
        box = row.locator("td").nth(1).locator("details")
        assert box.count() == 1
        summary = box.locator("summary")
        # The whole value in the title, as text; the markup in it never an element.
        assert summary.get_attribute("title") == LONG
        assert HOSTILE not in summary.inner_text()  # cut before the payload
        columns = page.evaluate(DIFF)["columns"]
        summary.click()
        assert box.evaluate("d => d.open")
        shown = box.inner_text()
        assert LONG in shown, shown[-300:]
        assert page.locator("img[src=x]").count() == 0
        # Opened, the other runs' columns keep their widths (within a few px) and the
        # page does not scroll sideways.
        opened = page.evaluate(DIFF)
        assert min(opened["columns"]) >= 100, opened["columns"]
        for before, after in zip(columns[1:], opened["columns"][1:], strict=True):
            assert abs(before - after) <= 0.15 * before, (columns, opened["columns"])
        assert opened["page"] <= 0
        row.scroll_into_view_if_needed()
        ui.shot(page, shots, f"newcomer_config_value_open_{width}", full=False)
        # The judge only one run has: its whole sub-tree, no longer cut at 160.
        strict = page.locator("[data-config-diff] tbody tr", has_text="strict")
        cell = strict.locator("td").nth(2)
        whole = cell.locator("details summary").get_attribute("title")
        assert len(whole) > 160 and not whole.endswith("\u2026"), whole
        assert whole.startswith("backend=rubric, rubric.answer_given.name=")
        assert whole.endswith("scale=10.0"), whole[-80:]
        cell.locator("summary").click()
        assert whole in cell.inner_text()


# --- 2. the group browser -----------------------------------------------------------

# A card's natural width: a copy of it out of the layout, as wide as its content.
# The room is counted in natural widths (the cards then grow into what is left).
ROWS = """() => [...document.querySelectorAll('.rollouts')].map(box => {
  const cards = [...box.querySelectorAll('.rollout')];
  const rows = [];
  let top = null;
  for (const c of cards) {
    const r = c.getBoundingClientRect();
    if (top === null || Math.abs(r.top - top) > 4) { rows.push(0); top = r.top; }
    rows[rows.length - 1]++;
  }
  const inner = box.getBoundingClientRect();
  const natural = Math.max(...cards.map(c => {
    const copy = c.cloneNode(true);
    copy.style.cssText = 'position:absolute;visibility:hidden;left:0;top:0;width:max-content';
    box.append(copy);
    const w = copy.getBoundingClientRect().width;
    copy.remove();
    return w;
  }));
  const widths = cards.map(c => c.getBoundingClientRect().width);
  const gap = parseFloat(getComputedStyle(box).columnGap) || 0;
  const first = cards.slice(0, rows[0]).map(c => c.getBoundingClientRect());
  return {rows, natural, widths, width: inner.width,
          room: Math.floor((inner.width + gap + 0.5) / (natural + gap)),
          span: first[first.length - 1].right - first[0].left,
          past: cards.filter(c => c.getBoundingClientRect().right > inner.right + 0.5).length,
          cut: cards.filter(c => c.scrollWidth > c.clientWidth).length};
})"""


@pytest.mark.parametrize("width", WIDTHS)
def test_a_group_of_cards_wraps_without_an_orphan(
    live, browser, seeded, ui, shots, width
):
    with ui.signed_in(browser, live, width) as page:
        seen = {}
        for key in [*range(2, 17), "calc8", "calc15"]:
            n = key if isinstance(key, int) else int(key[4:])
            page.goto(f"{live.url}/runs/{seeded[str(key)]}/trajectories/")
            page.wait_for_selector(".rollout dd")
            if key in (7, 8, 13, 16, "calc8", "calc15"):
                ui.shot(page, shots, f"newcomer_group_of_{key}_{width}", full=False)
            (box,) = page.evaluate(ROWS)
            seen[key] = box
            rows = box["rows"]
            assert sum(rows) == n, (n, box)
            assert box["past"] == 0 and box["cut"] == 0, (n, box)
            # As few rows as fit, their lengths at most one card apart: no card alone
            # on a row (unless a row holds one card only).
            assert len(rows) == -(-n // box["room"]), (n, box)
            assert max(rows) - min(rows) <= 1, (n, box)
            if box["room"] > 1 and n > 1:
                assert min(rows) >= 2, (n, box)
            # The cards grow into the room left: at least their natural width, at
            # most 1.6 times it, the first row across the whole box unless its cards
            # are at that cap (8 at 1400 px read 4 + 4 in the left half before).
            natural, widths = box["natural"], box["widths"]
            assert all(natural - 1 <= w <= 1.6 * natural + 1 for w in widths), box
            at_cap = all(w >= 1.6 * natural - 1 for w in widths)
            assert at_cap or box["span"] >= box["width"] - 1, (n, box)
        # A group of 8: one row where 8 fit, else 4 + 4 where 4 do (7 + 1 at 1400 px
        # before), else 3 + 3 + 2.
        room = seen[8]["room"]
        even = [8] if room >= 8 else [4, 4] if room >= 4 else [3, 3, 2]
        assert seen[8]["rows"] == (even if room != 2 else [2, 2, 2, 2]), seen[8]
        if width == 1400:
            assert seen[8]["rows"] == [4, 4], seen[8]
            # 4 + 4 across most of the panel, not its left half.
            assert seen["calc8"]["span"] >= 0.75 * seen["calc8"]["width"], seen["calc8"]
            # Calc's cards: 7 fit a row; 8 of them read 7 + 1 before, 15 7 + 7 + 1.
            assert seen["calc8"]["room"] == 7, seen["calc8"]
            assert seen["calc8"]["rows"] == [4, 4], seen["calc8"]
            assert seen["calc15"]["rows"] == [5, 5, 5], seen["calc15"]
        # Resized, the page lays its rows out again for its new width.
        page.set_viewport_size({"width": 1400 + 800 - width, "height": 900})
        fits = f"(b => b.past === 0 && b.rows.length === Math.ceil(16 / b.room))(({ROWS})()[0])"
        ui.until(page, fits, 5)
        (box,) = page.evaluate(ROWS)
        assert len(box["rows"]) == -(-16 // box["room"]), box
        assert box["past"] == 0, box


# --- 3. the new-run form's preset picker ----------------------------------------------

# The selected option's label against the select: a copy of the select holding only
# that option, at its natural width, is no wider than the select on the page.
PRESET = """() => {
  const s = document.querySelector("[name='algorithm.preset']");
  const copy = s.cloneNode(false);
  copy.removeAttribute('id'); copy.removeAttribute('name');
  copy.append(new Option(s.selectedOptions[0].textContent));
  copy.style.width = 'auto'; copy.style.position = 'absolute';
  s.parentElement.append(copy);
  const need = copy.getBoundingClientRect().width;
  copy.remove();
  const r = s.getBoundingClientRect();
  return {label: s.selectedOptions[0].textContent, need, has: r.width, right: r.right,
          box: s.closest('fieldset').getBoundingClientRect().right,
          page: document.documentElement.scrollWidth - window.innerWidth};
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_preset_picker_shows_its_whole_label(live, browser, ui, shots, width):
    with ui.signed_in(browser, live, width) as page:
        page.goto(live.url + "/runs/new/")
        picker = page.locator("[name='algorithm.preset']")
        values = picker.evaluate("s => [...s.options].map(o => o.value)")
        assert "dapo" in values and len(values) >= 5, values
        for value in values:
            picker.select_option(value)
            got = page.evaluate(PRESET)
            assert got["has"] >= got["need"] - 0.5, got
            assert got["right"] <= got["box"] and got["page"] <= 0, got
            if value == "dapo":
                assert got["label"] == "DAPO (clip-higher, dynamic sampling)"
                picker.scroll_into_view_if_needed()
                page.locator("fieldset", has=picker).screenshot(
                    path=str(shots / f"newcomer_preset_{width}.png")
                )


# Every select of the form against its widest label (a copy holding only that
# option, at its natural width).
SELECTS = """() => [...document.querySelectorAll('form select')].filter((s) => s.offsetParent)
  .map((s) => {
    let need = 0, widest = '';
    for (const o of s.options) {
      const copy = s.cloneNode(false);
      copy.removeAttribute('id'); copy.removeAttribute('name');
      copy.append(new Option(o.textContent));
      copy.style.width = 'auto'; copy.style.position = 'absolute';
      s.parentElement.append(copy);
      const w = copy.getBoundingClientRect().width;
      copy.remove();
      if (w > need) { need = w; widest = o.textContent; }
    }
    return {name: s.name, widest, need, has: s.getBoundingClientRect().width};
  })"""


@pytest.mark.parametrize("width", WIDTHS)
def test_every_select_of_the_form_shows_its_longest_label(live, browser, ui, width):
    """The algorithm overrides' "preset: drop_zero_variance" was cut at 1400 px."""
    with ui.signed_in(browser, live, width) as page:
        page.goto(live.url + "/runs/new/")
        page.evaluate(
            "document.querySelectorAll('details').forEach((d) => d.open = true)"
        )
        got = page.evaluate(SELECTS)
        assert len(got) >= 5, got
        cut = [g for g in got if g["has"] < g["need"] - 0.5]
        assert not cut, cut


CLONE_SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import Run
alice = get_user_model().objects.get(username='alice')
cfg = {"steps": 5, "env": {"name": "calc"}, "model": {"size": "tiny", "device": "cpu"}}
run = Run.objects.create(owner=alice, name='long values', config=cfg, status='succeeded')
print(json.dumps(str(run.pk)))
"""

LONG_VALUES = """() => [...document.querySelectorAll('[data-diff] [data-long-value]')].map((d) => ({
  summary: d.querySelector('summary').textContent, title: d.querySelector('summary').title,
  whole: d.querySelector('.whole').textContent}))"""


def test_the_clone_forms_diff_opens_a_long_value_whole(live, browser, ui):
    """The clone form's "Changes from the parent" cut values at 160 characters with
    nothing to open (another environment's parameters, a component one side has):
    it writes them as compare does, the page as it loads and as you type alike."""
    run = live.script(CLONE_SEED)
    with ui.signed_in(browser, live, 1400) as page:
        page.goto(f"{live.url}/runs/{run}/clone/")
        page.check("[name='env.name'][value=swarm]")
        ui.until(
            page,
            "document.querySelectorAll('[data-diff] [data-long-value]').length >= 2",
            30,
        )
        cells = page.evaluate(LONG_VALUES)
        for c in cells:
            assert c["whole"] == c["title"] and len(c["whole"]) > 100, c
            n = len(c["whole"])
            assert c["summary"] == c["whole"][:79] + f"\u2026 {n} characters", c
        assert any(len(c["whole"]) > 160 for c in cells), cells  # cut there before
        page.locator("[data-diff] [data-long-value] summary").last.click()
        assert page.locator("[data-diff] .whole").last.is_visible()
        page.guard.check()
