"""Length drift's repair advice said "add overlong_penalty in Clone and edit" with
nothing to click. Its alert now offers a button that opens the clone form with DAPO's
overlong penalty added, sized to the run's generation budget, and a notice saying why;
the form is valid as it opens and lists the change, at 1400 and 800 px."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from dashboard.models import Alert, Run
from tests.fixtures.seed import valid_config
alice = get_user_model().objects.get(username='alice')
cfg = valid_config('calc', 'grpo', 40, name='drift')
cfg['rollout'] = {**cfg.get('rollout', {}), 'max_turns': 3, 'max_action_tokens': 10}
run = Run.objects.create(owner=alice, name='<i>drifting</i> run', config=cfg,
                         status='succeeded')
Alert.objects.create(run=run, step=12, detector='length_drift',
                     message='length drift: truncated 5% -> 60%',
                     evidence={'truncated_early': 0.05, 'truncated_late': 0.6})
print(json.dumps(str(run.pk)))
"""


@pytest.mark.parametrize("width", [1400, 800])
def test_length_drift_opens_a_clone_with_the_overlong_penalty(
    live, browser, ui, shots, width
):
    run = live.script(SEED)
    with ui.signed_in(browser, live, width) as page:
        page.goto(f"{live.url}/runs/{run}/")
        alert = page.locator("#alert-length_drift-12")
        alert.locator("[data-alert-details] summary").click()
        hint = alert.locator("[data-repair-add]").text_content()
        assert "max_len 30 (this run's generation budget: 3 turns × 10 tokens)" in hint
        alert.scroll_into_view_if_needed()
        alert.screenshot(path=str(shots / f"length_repair_alert_{width}.png"))
        alert.locator("[data-repair-add-open]").click()
        page.wait_for_url(re.compile(rf".*/runs/{run}/clone/\?repair=length_drift"))
        notice = page.text_content("[data-repair-notice]")
        assert "Repairing length_drift (the alert at step 12)" in notice
        assert "overlong_penalty is added to the reward below at weight 1.0" in notice
        ui.until(
            page,
            "document.querySelector('[data-check-status]').textContent.includes('Valid')",
        )
        row = page.locator(
            "[data-component-row]",
            has=page.locator(
                "select[name$='.name'] option[value=overlong_penalty]:checked"
            ),
        )
        assert row.locator("input[name$='.params.max_len']").input_value() == "30"
        assert row.locator("input[name$='.params.cache']").input_value() == "6"
        assert (
            page.input_value("[name=name]")
            == "<i>drifting</i> run (repair: length drift)"
        )
        paths = page.locator("[data-diff] .diff-path").all_text_contents()
        assert any("overlong_penalty" in p for p in paths), paths
        ui.shot(page, shots, f"length_repair_clone_{width}", full=False)
        assert page.locator("i").count() == 0  # the name stays text
