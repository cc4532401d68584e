"""The new-run / clone form's side panel, as a newcomer met it at 1400 and 800 px:

1. with Steps 0 and Group size "abc" it said only "2 problems to fix", naming no field,
   the group size's error far down the page, and Launch looked as ready as ever. Now
   each problem is listed (the field's label and the message) as a link that opens,
   scrolls to and focuses its field; the list follows what is typed; Launch is greyed
   (``data-blocked``, described by the status) and a click or Enter sends nothing, says
   why (the server's own refusal banner too) and goes to the first problem; fixed, it
   launches;
2. the clone's "Changes from the parent" was a three-column table in the 320 px panel:
   names squeezed to a few characters a line ("<img src=x onerr / or=alert(1)>s /
   hort..."). Now each change is a row: the path on a line of its own, then "parent →
   this run" beneath, a long value still opening whole; the page writes the rows as the
   server does, node for node."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTHS = [1400, 800]
STATUS = "document.querySelector('[data-check-status]').textContent"
PROBLEMS = """() => [...document.querySelectorAll('[data-check-problems] li')].map(li => ({
  text: li.textContent, link: li.querySelector('a')?.textContent || null,
  for: li.querySelector('a')?.dataset.problemFor || null}))"""
HOSTILE = '<img src=x onerror=alert(1)>short & "quoted" run'


def _runs(live) -> int:
    return live.script(
        "from dashboard.models import Run\nprint(json.dumps(Run.objects.count()))"
    )


def _in_view(page) -> list:
    return page.evaluate(
        "() => { const a = document.activeElement, r = a.getBoundingClientRect();"
        " return [a.name, r.top >= 0 && r.bottom <= innerHeight]; }"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_each_problem_is_named_and_linked_and_launch_refuses_until_fixed(
    live, browser, ui, shots, width
):
    with ui.signed_in(browser, live, width) as page:
        page.goto(live.url + "/runs/new/")
        ui.until(page, f"{STATUS}.includes('Valid')")
        launch = page.locator("[data-launch]")
        assert launch.get_attribute("data-blocked") is None
        before = _runs(live)

        page.fill("[name=steps]", "0")
        page.fill("[name='rollout.group_size']", "abc")
        ui.until(
            page, "document.querySelectorAll('[data-check-problems] a').length === 2"
        )
        got = page.evaluate(PROBLEMS)
        assert got == [
            {"text": "Steps: Input should be greater than or equal to 1",
             "link": "Steps", "for": "steps"},
            {"text": "Group size: “abc” is not a whole number",
             "link": "Group size", "for": "rollout.group_size"},
        ], got  # fmt: skip
        assert page.text_content("[data-check-status]") == "2 problems to fix:"
        assert launch.get_attribute("data-blocked") == ""
        assert launch.evaluate("b => getComputedStyle(b).opacity") == "0.5"
        assert "Fix the 2 problems" in launch.get_attribute("title")
        assert launch.get_attribute("aria-describedby") == "check-status"
        page.locator(".form-side").screenshot(
            path=str(shots / f"form_problems_panel_{width}.png")
        )

        # A link goes to its field: focused, in view (the side panel is at the foot
        # of the page at 800 px, the group size a page's length above it).
        page.locator("[data-check-problems] a", has_text="Group size").click()
        assert _in_view(page) == ["rollout.group_size", True]
        ui.shot(page, shots, f"form_problem_link_{width}", full=False)

        # Launch sends nothing: it says why and goes to the first problem.
        launch.scroll_into_view_if_needed()
        launch.click()
        page.wait_for_timeout(600)
        assert page.url.endswith("/runs/new/") and _runs(live) == before
        assert "Not launched: fix the 2 problems" in page.text_content(
            "[data-check-status]"
        )
        assert "fix the 2 highlighted problems" in page.text_content(
            "[data-error-summary]"
        )
        assert _in_view(page) == ["steps", True]

        # The list follows the typing: one fixed, one left; Enter in a field refuses too.
        page.fill("[name=steps]", "2")
        ui.until(
            page, "document.querySelectorAll('[data-check-problems] a').length === 1"
        )
        assert page.evaluate(PROBLEMS)[0]["for"] == "rollout.group_size"
        assert "fix the 1 highlighted problem." in page.text_content(
            "[data-error-summary]"
        )
        page.press("[name=seed]", "Enter")
        page.wait_for_timeout(600)
        assert _runs(live) == before
        assert _in_view(page) == ["rollout.group_size", True]

        # A problem in a folded section: its link opens the section.
        page.fill("[name='rollout.group_size']", "2")
        page.evaluate(
            "document.querySelectorAll('details').forEach(d => d.open = true)"
        )
        page.fill("[name='optim.lr']", "-1")
        ui.until(
            page,
            "document.querySelector('[data-check-problems] a')?.dataset.problemFor === 'optim.lr'",
        )
        page.evaluate(
            "document.querySelectorAll('details').forEach(d => d.open = false)"
        )
        assert not page.is_visible("[name='optim.lr']")
        page.locator("[data-check-problems] a").click()
        assert _in_view(page) == ["optim.lr", True]
        page.fill("[name='optim.lr']", "0.001")

        # All fixed: the banner goes, Launch is itself again and launches.
        page.fill("[name='model.warmstart_steps']", "0")
        page.fill("[name='rollout.tasks_per_step']", "1")
        ui.until(page, f"{STATUS}.includes('Valid')")
        assert launch.get_attribute("data-blocked") is None
        assert page.locator("[data-check-problems]").is_hidden()
        assert page.locator("[data-error-summary]").is_hidden()
        with page.expect_navigation():
            launch.click()
        assert "/runs/new/" not in page.url and _runs(live) == before + 1


def test_problems_of_a_row_name_the_row_and_orphans_are_listed(live, browser, ui):
    """A component's weight is named with its component; a problem that no field
    shows (here the server's answer with one added) is listed as text, escaped."""
    hostile = "<img src=x onerror=alert(1)> no field"

    def add_orphan(route):
        res = route.fetch()
        body = res.json()
        body["ok"] = False
        body["errors"] = {**body["errors"], "nowhere.at.all": [hostile]}
        route.fulfill(response=res, body=json.dumps(body))

    with ui.signed_in(browser, live, 1400) as page:
        page.route("**/runs/new/check/", add_orphan)
        page.goto(live.url + "/runs/new/")
        page.fill("[name='reward.components.1.weight']", "x")
        ui.until(
            page, "document.querySelectorAll('[data-check-problems] li').length === 2"
        )
        got = page.evaluate(PROBLEMS)
        assert got[0] == {"text": hostile, "link": None, "for": None}, got
        assert got[1]["link"] == "Weight of component “format”", got
        assert page.locator("img[src=x]").count() == 0


def test_a_refused_launch_lists_its_problems_when_the_page_loads(live, browser, ui):
    """A browser that skipped the page's check (a plain form post): the server's
    answer is listed in the side panel as soon as the page is shown."""
    with ui.signed_in(browser, live, 1400) as page:
        page.goto(live.url + "/runs/new/")
        page.fill("[name='algorithm.clip_high']", "99")
        with page.expect_navigation():
            page.evaluate("document.getElementById('run-form').submit()")
        assert page.locator("[data-error-summary]").is_visible()
        got = page.evaluate(PROBLEMS)
        assert [g["for"] for g in got] == ["algorithm.clip_high"], got
        assert got[0]["link"] == "Clip high"
        assert page.get_attribute("[data-launch]", "data-blocked") == ""


# --- 2. the clone's changes from the parent ------------------------------------------

CLONE_SEED = f"""
from django.contrib.auth import get_user_model
from dashboard.models import Run
from tests.fixtures.seed import valid_config
alice = get_user_model().objects.get(username='alice')
cfg = valid_config('calc', 'grpo', 4, name={HOSTILE!r})
cfg['reward']['judges'][0]['rubric'][0]['description'] = 'short'
run = Run.objects.create(owner=alice, name={HOSTILE!r}, config=cfg, status='succeeded')
print(json.dumps(str(run.pk)))
"""

ROWS = """() => [...document.querySelectorAll('[data-diff] [data-diff-row]')].map(r => {
  const path = r.querySelector('.diff-path'), lh = parseFloat(getComputedStyle(path).lineHeight);
  const box = (sel) => r.querySelector(sel).getBoundingClientRect();
  return {path: path.textContent, pathLines: Math.round(path.getBoundingClientRect().height / lh),
          old: r.querySelector('.old .config-value').innerText, new: r.querySelector('.new .config-value').innerText,
          row: r.getBoundingClientRect().width, pathWidth: box('.diff-path').width,
          oldTop: box('.old').top, newTop: box('.new').top, pathBottom: box('.diff-path').bottom};
})"""

# The rows as the server wrote them, against those the page's script wrote since.
SAME = """async () => {
  const html = await (await fetch(location.href, {credentials: 'same-origin'})).text();
  const doc = new DOMParser().parseFromString(html, 'text/html');
  const server = [...doc.querySelectorAll('[data-diff] [data-diff-row]')];
  const page = [...document.querySelectorAll('[data-diff] [data-diff-row]')];
  return {server: server.length, page: page.length,
          differ: server.map((r, i) => r.isEqualNode(page[i]) ? null : i).filter(i => i !== null),
          serverHTML: server.map(r => r.outerHTML), pageHTML: page.map(r => r.outerHTML)};
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_the_clones_changes_read_one_a_row(
    live, browser, ui, shots, width, seeded_runs
):
    run = live.script(CLONE_SEED)
    seeded_runs.append(run)
    weights = json.dumps({"format": 0.0, "judge": 0.0})
    with ui.signed_in(browser, live, width) as page:
        page.goto(f"{live.url}/runs/{run}/clone/?weights={weights}")
        ui.until(
            page,
            "document.querySelector('[data-check-status]').textContent.includes('Valid')",
        )
        ui.until(
            page,
            "document.querySelectorAll('[data-diff] [data-diff-row]').length === 3",
        )
        rows = {r["path"]: r for r in page.evaluate(ROWS)}
        page.locator("[data-diff]").scroll_into_view_if_needed()
        page.locator(".form-side").screenshot(
            path=str(shots / f"clone_changes_{width}.png")
        )
        assert set(rows) == {
            "name", "reward.components.format.weight", "reward.components.judge.weight"
        }  # fmt: skip
        for r in rows.values():
            # The path whole on its line, the values beneath it, as wide as the panel.
            assert r["pathLines"] == 1, r
            assert (
                r["oldTop"] >= r["pathBottom"] - 1
                and r["newTop"] >= r["pathBottom"] - 1
            ), r
        weight = rows["reward.components.format.weight"]
        assert (weight["old"], weight["new"]) == ("0.1", "0.0")
        assert weight["oldTop"] == weight["newTop"]  # "0.1 → 0.0" on one line
        name = rows["name"]
        assert name["old"] == HOSTILE and name["new"] == f"{HOSTILE} (reweighted)"
        assert page.locator("img[src=x]").count() == 0
        # Read aloud: "parent: 0.1 this run: 0.0" (the arrow is for the eyes).
        said = page.locator("[data-diff] [data-diff-row]").nth(1).inner_text()
        assert "→" in said
        same = page.evaluate(SAME)
        assert same["server"] == same["page"] == 3 and same["differ"] == [], same


def test_a_long_change_opens_whole_in_its_row(live, browser, ui, shots, seeded_runs):
    run = live.script(CLONE_SEED)
    seeded_runs.append(run)
    with ui.signed_in(browser, live, 1400) as page:
        page.goto(f"{live.url}/runs/{run}/clone/")
        long = "a rubric that reads " * 12 + "<b>end</b>"
        page.fill("[name='reward.judges.0.rubric.0.description']", long)
        ui.until(page, "document.querySelector('[data-diff] [data-long-value]')")
        row = page.locator(
            "[data-diff] [data-diff-row]", has=page.locator("[data-long-value]")
        )
        assert row.locator(".diff-path").inner_text().replace("\n", "") == (
            "reward.judges.rules.rubric.answer_given.description"
        )
        row.locator("summary").click()
        whole = row.locator(".new .whole")
        assert whole.is_visible() and whole.text_content() == long
        box = whole.bounding_box()
        panel = page.locator(".form-side").bounding_box()
        assert (
            box["x"] >= panel["x"]
            and box["x"] + box["width"] <= panel["x"] + panel["width"]
        )
        row.screenshot(path=str(shots / "clone_changes_long_open.png"))
