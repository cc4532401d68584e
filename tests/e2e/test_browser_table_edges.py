"""A table of runs that fits its box shows nothing at its edges: the sideways-scroll
shadows (static/css/app.css, .table-wrap) are covered where the table ends. The
covers were solid over 7 of the shadows' 12 px, so home's rows showed a faint
vertical line right of the Env cell (and left of the checkboxes), darkest in the
rows at the table's middle height. A table that does scroll keeps its shadow."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from tests.fixtures.seed import seed_run
alice = get_user_model().objects.get(username='alice')
runs = [seed_run(alice, name=f'edges {i}', env='calc', steps=3, seed=i) for i in range(3)]
print(json.dumps([str(r.pk) for r in runs]))
"""

WRAP = "document.querySelector('[data-rows-region] .table-wrap')"


def _with_and_without_shadows(page) -> tuple[bytes, bytes]:
    """The first runs table as drawn, and drawn with no background layers."""
    wrap = page.locator("[data-rows-region] .table-wrap").first
    drawn = wrap.screenshot()
    page.evaluate(f"{WRAP}.style.backgroundImage = 'none'")
    bare = wrap.screenshot()
    page.evaluate(f"{WRAP}.style.backgroundImage = ''")
    return drawn, bare


def test_a_runs_table_that_fits_has_no_line_at_its_edges(live, browser, ui, shots):
    live.script(SEED)
    with ui.signed_in(browser, live, 1360) as page:
        page.goto(live.url + "/")
        page.wait_for_selector("[data-rows-region] [data-run-row]")
        page.mouse.move(1, 1)  # no row hovered
        fits = page.evaluate(f"{WRAP}.scrollWidth <= {WRAP}.clientWidth")
        assert fits, "the home table scrolls at 1360 px"
        drawn, bare = _with_and_without_shadows(page)
        (shots / "table_edges_fit.png").write_bytes(drawn)
        same = drawn == bare  # pixel for pixel: the PNGs are the same bytes
        assert same, (
            "the scroll shadows show on a table that does not scroll "
            f"(see {shots / 'table_edges_fit.png'})"
        )

        # Narrowed until it scrolls: the shadow says there is more on the right.
        page.evaluate(f"{WRAP}.style.width = '360px'")
        assert page.evaluate(f"{WRAP}.scrollWidth > {WRAP}.clientWidth")
        drawn, bare = _with_and_without_shadows(page)
        (shots / "table_edges_scrolls.png").write_bytes(drawn)
        assert drawn != bare, "a table that scrolls lost its shadow"
