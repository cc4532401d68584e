"""Pause and Resume from the run page, with the real trainer: Pause says it is
pausing until the run stops at its next step; the open page then shows, live, what a
reload shows (the paused badge, the note with the step, Resume); Resume queues it and
it goes on from that step; Cancel ends it."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LAUNCH = """async () => {
  const csrf = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  const r = await fetch("/api/runs", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf.split("=")[1] },
    body: JSON.stringify({
      name: "pause <i>me</i>",
      config: {
        steps: 400, seed: 3, checkpoint: { every: 0 },
        model: { size: "tiny", device: "cpu", warmstart_steps: 0 },
        rollout: { tasks_per_step: 2, group_size: 2, max_turns: 2 },
      },
    }),
  });
  return [r.status, await r.json()];
}"""

STEP = "Number(document.querySelector('[data-last-step]').textContent)"
BADGE = "document.querySelector('[data-run-status] .badge').textContent"


def test_pause_and_resume_from_the_run_page(live, page, shots, ui):
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/")
    status, body = page.evaluate(LAUNCH)
    assert status == 201, body
    run = body["id"]
    page.goto(f"{live.url}/runs/{run}/")
    ui.until(page, f"{STEP} >= 2", 180)
    assert page.locator("[data-resume]").count() == 0
    page.click("[data-pause]")
    page.wait_for_url(f"{live.url}/runs/{run}/")
    # Asked: the button says so until the trainer stops at its next step.
    assert "Pause requested: the run stops at its next step" in page.text_content(
        ".messages"
    )
    ui.until(page, f"{BADGE} === 'paused'", 60)
    ui.until(page, "!!document.querySelector('[data-resume]')", 15)
    at = page.evaluate(STEP)
    note = page.text_content("[data-run-error]").strip()
    assert note == (
        f"Note: Paused by its owner at step {at}; Resume queues it again from there."
    )
    assert page.locator("[data-pause]").count() == 0
    assert page.is_hidden(".messages .pause-pending")
    assert page.text_content("[data-live-text]") == "connected; paused"
    ui.shot(page, shots, "pause_1_paused", full=False)
    page.wait_for_timeout(2000)
    assert page.evaluate(STEP) == at  # nothing trains while paused
    wall = page.text_content("[data-stat='duration']")
    page.reload()
    assert page.text_content("[data-run-error]").strip() == note
    assert page.text_content("[data-stat='duration']") == wall

    page.click("[data-resume]")
    page.wait_for_url(f"{live.url}/runs/{run}/")
    assert f"Resumed: queued to go on from step {at}." in page.text_content(".messages")
    ui.until(page, f"{STEP} > {at}", 120)
    assert page.evaluate(BADGE) == "running"
    ui.until(page, "!!document.querySelector('[data-pause]')", 15)
    ui.shot(page, shots, "pause_2_resumed", full=False)
    page.click("[data-cancel]")
    page.click("[data-cancel-confirm]")
    ui.until(page, f"{BADGE} === 'cancelled'", 60)
    attempts = page.evaluate(
        "[...document.querySelectorAll('[data-attempt]')].map((r) => r.innerText)"
    )
    assert len(attempts) == 2 and "paused" in attempts[0], attempts
    page.guard.check()
