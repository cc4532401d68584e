"""A number typed into the run form is either exactly what launches or an error next to
its field: "0.5e" in a swarm weight, "abc", a temperature of "1e400" (issue 11, item 1).
A number input used to send "" for these and the default weight launched unseen."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WEIGHT = "[name='reward.components.1.weight']"  # swarm's r_parallel, 0.3
TEMPERATURE = "[name='rollout.temperature']"
GROUPS = "[name='record.groups']"


def _errors(page, name: str) -> str:
    return page.text_content(f"[data-errors-for='{name}']") or ""


def _runs(live) -> int:
    return live.script(
        "from dashboard.models import Run\nprint(json.dumps(Run.objects.count()))"
    )


def test_mistyped_numbers_show_an_error_beside_the_field_and_never_launch(
    live, page, shots, ui
):
    ui.login(page, live.url)
    page.goto(live.url + "/runs/new/")
    page.check("input[name='env.name'][value='swarm']")
    ui.until(
        page,
        "document.querySelector(\"[name='reward.components.1.name']\")?.value"
        " === 'r_parallel'",
    )
    ui.until(
        page,
        "document.querySelector('[data-check-status]').textContent.includes('Valid')",
    )
    assert page.input_value(WEIGHT) == "0.3"
    before = _runs(live)

    page.fill(WEIGHT, "0.5e")
    # Shown at once, by the page itself, and kept after the server's check answers.
    assert _errors(page, "reward.components.1.weight") == "“0.5e” is not a number"
    assert page.get_attribute(WEIGHT, "aria-invalid") == "true"
    page.wait_for_timeout(800)
    assert _errors(page, "reward.components.1.weight") == "“0.5e” is not a number"
    status = page.text_content("[data-check-status]")
    assert "Valid" not in status and "problem" in status
    assert page.input_value(WEIGHT) == "0.5e"  # what the user typed stays visible
    ui.shot(page, shots, "form_number_error")

    page.fill(WEIGHT, "abc")
    assert page.input_value(WEIGHT) == "abc"  # not blanked
    assert _errors(page, "reward.components.1.weight") == "“abc” is not a number"

    page.fill(TEMPERATURE, "1e400")
    assert _errors(page, "rollout.temperature") == "“1e400” is too large to be a number"

    # Groups per recorded step: a whole number, "auto" or blank (all), by the same rule.
    assert page.input_value(GROUPS) == "auto"
    page.fill(GROUPS, "Auto")
    assert _errors(page, "record.groups") == "“Auto” is not a whole number or “auto”"
    page.fill(GROUPS, "")
    assert _errors(page, "record.groups") == ""
    page.fill(GROUPS, "4")

    page.click("[data-launch]")
    page.wait_for_timeout(500)
    assert page.url.endswith("/runs/new/")
    assert _runs(live) == before

    # What a browser without this page's check lets through, the server refuses.
    page.fill(TEMPERATURE, "1.0")
    page.fill(WEIGHT, "0.5e")
    with page.expect_navigation():
        page.evaluate("document.getElementById('run-form').submit()")
    assert page.url.endswith("/runs/new/")
    assert _errors(page, "reward.components.1.weight") == "“0.5e” is not a number"
    assert page.input_value(WEIGHT) == "0.5e"
    assert _runs(live) == before

    # A number written plainly launches exactly as typed.
    page.fill("[name=steps]", "2")
    # No warm start: its 300 steps are not cancellable and, on loaded cores, outlast
    # the module's teardown, which cancels what is left running.
    page.fill("[name='model.warmstart_steps']", "0")
    page.fill("[name='rollout.tasks_per_step']", "1")
    page.fill("[name='rollout.group_size']", "2")
    page.fill(WEIGHT, "0.25")
    ui.until(
        page,
        "document.querySelector('[data-check-status]').textContent.includes('Valid')",
    )
    with page.expect_navigation():
        page.click("[data-launch]")
    run_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    weight, groups = live.script(
        "from dashboard.models import Run\n"
        f"run = Run.objects.get(pk={run_id!r})\n"
        "print(json.dumps([run.config['reward']['components'][1]['weight'],"
        " run.config['record']['groups']]))"
    )
    assert weight == 0.25 and groups == 4
    page.guard.check()
