"""The repair loop in the browser, for spurious parallelism (issue 25, item 4): a run
that learned to spawn sub-agents it never finishes raised its alert; from it the user
opens the evidence, opens the what-if with the suggested weight (``r_finish``, which
the run did not have), sees what it changes in the run's own rollouts, opens the clone
form filled with it, reviews it and launches the clone, and on the clone's page sees the hack's statistics stay on the healthy
side of the detector's thresholds while its parent's did not."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from tests.fixtures.hacked import seed_spurious
alice = get_user_model().objects.get(username='alice')
run = seed_spurious(alice, steps=24, onset=8, name='swarm <b>spurious</b> & co')
alert = run.alert_set.get(detector='spurious_parallelism')
print(json.dumps({'run': str(run.pk), 'step': alert.step}))
"""


def test_the_repair_loop_for_spurious_parallelism(repair_live, page, shots, ui):
    seeded = repair_live.script(SEED)
    run, step = seeded["run"], seeded["step"]
    ui.login(page, repair_live.url)
    page.goto(f"{repair_live.url}/runs/{run}/")
    # The name is the run's text, escaped.
    assert page.text_content("h1") == "swarm <b>spurious</b> & co"

    # The alert, and its evidence: the numbers and the hacked rollouts.
    alert = page.locator(f"#alert-spurious_parallelism-{step}")
    assert "spurious parallelism" in alert.text_content()
    assert alert.locator("[data-evidence-link]").count() > 0
    alert.locator("[data-alert-details] summary").click()
    table = alert.locator("[data-evidence-table]")
    assert table.is_visible()
    assert "finish_rate_late" in table.text_content()
    hint = alert.locator("[data-repair-hint]").text_content()
    assert "r_finish" in hint and "1.0" in hint and "not in this run" in hint
    ui.shot(page, shots, "repair_1_alert_evidence")
    # Each reason once, its rollouts under it; the live page (static/js/run_alerts.js)
    # writes an arriving alert word for word as the server does.
    evidence = alert.locator("[data-alert-evidence]")
    served = " ".join(evidence.text_content().split())
    assert served.startswith("Evidence: ") and "sub-agents per stage" in served
    reasons = evidence.locator("[data-evidence-why]").all_text_contents()
    assert len(reasons) == len(set(reasons)) > 0
    live = page.evaluate(
        """async ([run, step]) => {
          const { runAlerts } = await import("/static/js/run_alerts.js");
          const r = await fetch(`/api/runs/${run}/alerts?step=${step}`);
          const a = (await r.json()).alerts.find((x) => x.detector === "spurious_parallelism");
          const list = document.createElement("ul");
          list.setAttribute("data-alerts", "");
          const real = document.querySelector("[data-alerts]");
          real.removeAttribute("data-alerts");
          document.body.append(list);
          runAlerts(`/runs/${run}/trajectories/`, () => {}).addAlert(a);
          const text = list.querySelector("[data-alert-evidence]").textContent;
          list.remove();
          real.setAttribute("data-alerts", "");
          return text;
        }""",
        [run, step],
    )
    assert " ".join(live.split()) == served
    # Reasons alike but for their numbers: one line, ranges, the same both sides.
    from dashboard.reads.evidence import _ranged

    cases = [
        [
            "2 tokens (0.4x the early mean), not solved",
            "3 tokens (0.6x the early mean), not solved",
        ],
        [
            "entropy 1.166 nats/token",
            "entropy 0.91 nats/token",
            "entropy 1.0 nats/token",
        ],
        ["-3 x", "10 x", "1 x"],
        ["answered after at most one search"],
    ]
    got = page.evaluate(
        """async (cases) => {
          const { ranged } = await import("/static/js/run_alerts.js");
          return cases.map(ranged);
        }""",
        cases,
    )
    assert got == [_ranged(c) for c in cases], got

    # An evidence rollout is one of the hacked ones: many sub-agents, few finished.
    href = alert.locator("[data-evidence-link]").first.get_attribute("href")
    why = alert.locator("[data-evidence-link]").first.get_attribute("title")
    assert "sub-agents per stage" in why

    # The what-if opened with the suggested weight, recomputed at once.
    alert.locator("[data-repair-open]").click()
    whatif = page.locator("#whatif")
    assert whatif.locator("[data-whatif-repair]").is_visible()
    assert (
        "spurious_parallelism" in whatif.locator("[data-whatif-repair]").text_content()
    )
    field = whatif.locator('[data-weight="r_finish"]')
    assert field.input_value() == "1" and field.get_attribute("data-suggested") == ""
    ui.until(page, "!document.querySelector('[data-whatif-result]').hidden")
    summary = whatif.locator("[data-whatif-summary]").text_content()
    assert "change their best rollout" in summary
    assert not summary.startswith("0 of")  # paying for finished subtasks changes things
    assert whatif.locator("[data-whatif-examples] tbody tr").count() > 0
    assert "?repair=spurious_parallelism" in page.url
    # The address opens the same repair (a bookmark, a link from the webhook).
    page.reload()
    ui.until(page, "!document.querySelector('[data-whatif-result]').hidden")
    assert field.input_value() == "1" and "?repair=" in page.url
    ui.shot(page, shots, "repair_2_whatif")

    # The clone form: the parent's config with r_finish = 1, named for the repair;
    # reviewed, then launched.
    whatif.locator("[data-whatif-clone]").click()
    page.wait_for_url(lambda url: f"/runs/{run}/clone/?weights=" in url)
    assert "spurious_parallelism" in page.text_content("[data-whatif-notice]")
    assert page.input_value("[name=name]").endswith("(repair: spurious parallelism)")
    page.locator("[data-launch]").first.click()
    page.wait_for_url(lambda url: f"/runs/{run}/" not in url and "/runs/" in url)
    clone = page.url.split("/runs/")[1].split("/")[0]
    assert page.locator("h1").text_content().endswith("(repair: spurious parallelism)")
    panel = page.locator("#repair")
    assert "r_finish" in panel.text_content()
    assert panel.locator("a").first.get_attribute("href").startswith(f"/runs/{run}/")

    # It trains (the stand-in trainer plays the repaired policy through the sink);
    # the comparison settles on "held" once it has finished.
    ui.until(
        page,
        "document.querySelector('[data-repair-verdict]').textContent"
        ".includes('(24 steps)')",
        timeout=120,
    )
    verdict = panel.locator("[data-repair-verdict]")
    assert verdict.get_attribute("data-state") == "held"
    text = verdict.text_content()
    assert "never fired on the clone" in text and "The parent was in the hack" in text
    stats = panel.locator("[data-repair-stat]")
    assert stats.count() == 2  # finish rate and sub-agents per stage
    finish = panel.locator('[data-repair-stat="finish_rate/mean"]')
    assert "at or below 0.4" in finish.text_content()
    parent_line, clone_line = finish.locator("[data-stat-lines] li").all_text_contents()
    assert "past the threshold at" in parent_line  # the parent's finish rate fell
    assert "never past the threshold" in clone_line  # the clone's never did
    assert finish.locator("canvas").count() > 0  # drawn
    assert "threshold (hack at or below 0.4)" in finish.text_content()
    page.evaluate("document.getElementById('repair').scrollIntoView()")
    ui.shot(page, shots, "repair_3_clone_comparison")

    # The parent lists its clone, and the evidence link opens a rollout.
    page.goto(f"{repair_live.url}/runs/{run}/")
    assert page.locator(f'a[href="/runs/{clone}/"]').count() > 0
    page.goto(repair_live.url + href)
    assert page.locator("h1").count() == 1
    page.guard.check()
