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


MICRO = "[name='optim.micro_batch_size']"


def test_an_update_that_would_not_fit_opens_the_folded_field_that_fixes_it(
    live, page, shots, ui
):
    """The memory refusal names ``optim.micro_batch_size``, which lives in the folded
    "Optimiser, checkpoints and evaluation" section: the section opens when the
    error appears, so the field that fixes it is in sight, and micro-batches of 16
    take the error away from it."""
    ui.login(page, live.url)
    page.goto(live.url + "/runs/new/")
    ui.until(
        page,
        "document.querySelector('[data-check-status]').textContent.includes('Valid')",
    )
    assert not page.is_visible(MICRO)  # folded away at first
    page.select_option("[name='model.size']", "small")
    # 2,048 rollouts of up to 1,024 tokens: the update's one minibatch would hold
    # ~190 GiB of activations (the KV cache while generating: ~16 GiB).
    for name, value in (
        ("rollout.tasks_per_step", "256"),
        ("rollout.group_size", "8"),
        ("rollout.max_turns", "1"),
        ("rollout.max_action_tokens", "1024"),
        ("rollout.max_total_tokens", "1024"),
    ):
        page.fill(f"[name='{name}']", value)
    ui.until(
        page,
        "document.querySelector(\"[data-errors-for='optim.micro_batch_size']\")"
        ".textContent.includes('update')",
    )
    message = page.text_content("[data-errors-for='optim.micro_batch_size']")
    assert "2,048 rollouts of up to 1,024 tokens" in message
    assert page.is_visible(MICRO)  # its section opened
    page.locator(MICRO).scroll_into_view_if_needed()
    ui.shot(page, shots, "form_micro_batches_refused", full=False)
    page.fill(MICRO, "16")
    ui.until(
        page,
        "document.querySelector(\"[data-errors-for='optim.micro_batch_size']\")"
        ".textContent === ''",
    )
