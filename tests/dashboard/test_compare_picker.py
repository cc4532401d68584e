"""``/compare/`` with no runs chosen (the menu's "Compare") said "Pick between 2 and 8
runs to compare (got 0)" and offered nothing to pick with. It lists the user's recent
runs with the runs list's compare boxes (name, status, algorithm, environment, latest
reward), names escaped; runs already asked for come ticked; someone else's runs are
not offered; with none at all it says how to get some."""

from __future__ import annotations

import re

import pytest

from dashboard.models import Run
from dashboard.pages import compare_picker
from tests.dashboard.dashtest import client_for
from tests.fixtures.seed import seed_run, valid_config

pytestmark = pytest.mark.django_db

HOSTILE = "<img src=x onerror=alert(1)> & run"


def _boxes(html: str) -> dict[str, bool]:
    """run id -> ticked, of every compare box on the page."""
    return {
        m.group(1): "checked" in m.group(2)
        for m in re.finditer(
            r'value="([^"]+)" form="compare-form"[^>]*?(data-compare-box[^>]*)>', html
        )
    }


def test_no_runs_chosen_offers_the_recent_runs_to_pick(owner, other):
    swarm = seed_run(owner, name="swarm-dr", env="swarm", preset="dr_grpo", steps=4)
    calc = seed_run(owner, name=HOSTILE, env="calc", preset="grpo", steps=4, seed=1)
    theirs = seed_run(other, name="not yours", steps=2)
    r = client_for(owner).get("/compare/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "Pick between 2 and 8 runs to compare: tick them below" in html
    assert "(got 0)" not in html
    assert 'id="compare-form"' in html and "data-compare-button" in html
    assert "js/runs_list.js" in html and "js/compare.js" not in html
    assert _boxes(html) == {str(calc.pk): False, str(swarm.pk): False}
    assert str(theirs.pk) not in html and "not yours" not in html
    # Each row: the name (escaped, a link), status, algorithm, environment, latest.
    row = html[html.index(f'data-run-row="{calc.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; run" in row and "<img" not in row
    assert f'href="/runs/{calc.pk}/"' in row
    assert "succeeded" in row and "GRPO" in row and ">calc<" in row
    latest = re.search(r'class="col-latest num">([^<]+)<', row).group(1)
    float(latest)  # its latest reward, a number (not "—")
    assert (
        'aria-label="Select &lt;img src=x onerror=alert(1)&gt; &amp; run to compare"'
        in row
    )


def test_too_few_or_too_many_keep_the_ones_asked_for_ticked(owner):
    runs = [seed_run(owner, name=f"r{i}", steps=1, seed=i) for i in range(3)]
    c = client_for(owner)
    r = c.get(f"/compare/?runs={runs[1].pk}")
    assert r.status_code == 400
    html = r.content.decode()
    assert "Pick between 2 and 8 runs to compare (got 1)." in html
    assert _boxes(html) == {
        str(runs[2].pk): False, str(runs[1].pk): True, str(runs[0].pk): False
    }  # fmt: skip
    # Ticking a second and comparing (what runs_list.js sends) compares them.
    assert c.get(f"/compare/?runs={runs[1].pk},{runs[0].pk}").status_code == 200


def test_the_newest_are_offered_and_the_rest_are_on_the_runs_list(owner):
    for i in range(compare_picker.PICK + 2):
        Run.objects.create(
            owner=owner, name=f"run {i}", config=valid_config("calc", "grpo", 2),
            status="succeeded",
        )  # fmt: skip
    html = client_for(owner).get("/compare/").content.decode()
    assert len(_boxes(html)) == compare_picker.PICK
    assert f"The newest {compare_picker.PICK} of {compare_picker.PICK + 2} runs" in html
    assert 'href="/runs/"' in html


def test_with_no_runs_it_says_how_to_get_some(owner):
    html = client_for(owner).get("/compare/").content.decode()
    assert "There are no runs to compare yet" in html and 'href="/runs/new/"' in html
    assert "compare-form" not in html and "between 2 and 8" not in html
