"""At 800 px, as a newcomer met it: the top bar wrapped onto two lines (the brand and
the five links on one, Shortcuts, Settings, API tokens, the user and Sign out on a
second), and compare's Summary cut off its time and alerts columns in a sideways
scroll. Now the bar keeps one line (tighter gaps; Shortcuts is its "?" key alone,
its name kept for screen readers), and the summary's headers wrap and its cells pad
less as its box narrows."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The widest cells a summary holds: long names, the longest algorithm labels, the
# widest status badge, a step count of a known total.
SEED = """
from django.contrib.auth import get_user_model
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
ids = []
for i, (name, preset, env, status) in enumerate([
        ('verl-qwen2.5-7b-grpo-gsm8k-lr1e-6', 'grpo', 'search', 'succeeded'),
        ('swarm baseline, seed 3', 'dr_grpo', 'swarm', 'unresponsive'),
        ('calc dapo sweep 12', 'dapo', 'calc', 'failed')]):
    r = seed_run(alice, name=name, env=env, preset=preset, steps=40, done=6,
                 seed=i, status=status, groups=1, group_size=2)
    ids.append(str(r.pk))
print(json.dumps(ids))
"""

BAR = """() => {
  const bar = document.querySelector('.topbar');
  const items = [...bar.querySelectorAll('.brand, nav a, .user > *')].filter(e => e.getClientRects().length)
    .map(e => { const r = e.getBoundingClientRect();
      return {text: e.textContent.trim(), top: r.top, bottom: r.bottom, mid: (r.top + r.bottom) / 2, right: r.right}; });
  return {height: bar.getBoundingClientRect().height, over: bar.scrollWidth - bar.clientWidth,
          width: document.documentElement.clientWidth, items};
}"""

SUMMARY = """() => {
  const w = document.querySelector('[data-summary]').closest('.table-wrap');
  const right = w.getBoundingClientRect().right;
  const cells = [...w.querySelectorAll('th, td')].filter(c => c.getClientRects().length);
  const s = getComputedStyle(w);
  return {over: w.scrollWidth - w.clientWidth,
          cut: cells.filter(c => c.getBoundingClientRect().right > right + 0.5).map(c => c.textContent.trim()),
          heads: [...w.querySelectorAll('thead th')].filter(c => c.getClientRects().length).map(c => c.textContent.trim()),
          shadow: [s.backgroundImage.split('radial-gradient').length - 1, s.backgroundAttachment]};
}"""


@pytest.fixture(scope="module")
def runs(live):
    return live.script(SEED)


@pytest.mark.parametrize("width", [800, 1280])
def test_the_top_bar_keeps_one_line(live, browser, runs, ui, out_dir, width):
    pages = {
        "home": "/",
        "runs": "/runs/",
        "new": "/runs/new/",
        "run": f"/runs/{runs[0]}/",
        "compare": f"/compare/?runs={','.join(runs)}",
        "datasets": "/datasets/",
    }
    with ui.signed_in(browser, live, width) as page:
        for name, path in pages.items():
            page.goto(live.url + path)
            page.wait_for_selector(".topbar .user")
            bar = page.evaluate(BAR)
            if name == "compare":
                page.screenshot(path=str(out_dir / f"topbar_{width}.png"))
            texts = [i["text"] for i in bar["items"]]
            assert len(texts) == 11, texts  # brand, 5 links, 5 user items
            mids = [i["mid"] for i in bar["items"]]
            # One line: every item's middle within a few px of every other's, none
            # past the window's edge, and the bar as tall as one line.
            assert max(mids) - min(mids) <= 6, (name, width, bar)
            assert bar["height"] <= 48, (name, width, bar)
            assert bar["over"] <= 0, (name, width, bar)
            assert max(i["right"] for i in bar["items"]) <= bar["width"], (name, bar)
        # Shortcuts: its word at 1280, its key alone at 800; named either way.
        button = page.locator("[data-shortcuts]")
        assert "Shortcuts" in button.text_content()
        label = page.locator("[data-shortcuts] .wide-label").bounding_box()
        assert (label["width"] > 20) == (width > 960), label
        button.click()
        assert page.locator("#shortcuts").is_visible()


def test_the_compare_summary_shows_every_column_at_800(
    live, browser, runs, ui, out_dir
):
    with ui.signed_in(browser, live, 800) as page:
        page.goto(f"{live.url}/compare/?runs={','.join(runs)}")
        page.wait_for_selector("[data-summary] tbody tr")
        page.locator("[data-summary]").screenshot(
            path=str(out_dir / "compare_summary_800.png")
        )
        got = page.evaluate(SUMMARY)
        assert got["over"] <= 0 and got["cut"] == [], got
        for head in ("run", "status", "algorithm", "steps", "time", "alerts"):
            assert any(h.startswith(head) for h in got["heads"]), got
        # Past its room, it would scroll with the runs table's shadow.
        assert got["shadow"][0] == 2 and got["shadow"][1].count("local") == 2, got
        assert page.evaluate(
            "document.documentElement.scrollWidth <= window.innerWidth"
        )
