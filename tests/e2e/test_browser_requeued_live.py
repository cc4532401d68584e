"""A run page left open while the run goes back to the queue after some steps (a demo
paused for a user's run, a retry after a lost worker) shows, live, what a reload of
it shows: the place in line with "open that run" (the run it waits behind), the note
on why it waits, and the Model button for the checkpoint it kept at the stop. The
live page said "connected; queued again after step 5" and nothing more."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from django.utils import timezone
from dashboard.models import Run, RunAttempt, RunStatus
alice = get_user_model().objects.get(username="alice")
now = timezone.now()
mine = Run.objects.create(
    owner=alice, name="my <b>own</b> run", config={"steps": 200, "env": {"name": "calc"}},
    status=RunStatus.RUNNING, last_step=3, started_at=now, heartbeat_at=now,
)
demo = Run.objects.create(
    owner=alice, name="demo: paused live", demo=True,
    config={"steps": 50, "env": {"name": "calc"}}, status=RunStatus.RUNNING,
    last_step=4, attempt=1, started_at=now, heartbeat_at=now,
)
RunAttempt.objects.create(run=demo, number=1, started_at=now)
print(json.dumps([str(mine.pk), str(demo.pk)]))
"""

# What lease.pause leaves: the checkpoint kept at the stop, the run queued again with
# its note (the trainer's own pause path needs a user's run submitted meanwhile).
PAUSE = """
from trainer.config import TrainConfig
from django.utils import timezone
from dashboard.models import Checkpoint, Run, RunAttempt, RunStatus
from dashboard.runs.execution import checkpoint_dir
run = Run.objects.get(pk={demo!r})
path = checkpoint_dir(run.pk) / "step-000005"
path.mkdir(parents=True)
(path / "policy.safetensors").write_bytes(b"")
cfg = TrainConfig.model_validate(run.config).model_dump(mode="json")
(path / "meta.json").write_text(json.dumps({{"config": cfg}}))
Checkpoint.objects.create(run=run, step=5, path=str(path))
note = "paused at step 5 for a user's run; resumes after it, from where it was"
RunAttempt.objects.filter(run=run, number=1).update(
    ended_at=timezone.now(), outcome="paused", message=note
)
Run.objects.filter(pk=run.pk).update(
    status=RunStatus.QUEUED, lease=None, last_step=5, error=note
)
print(1)
"""

# The parts a reload renders from what the server stores; the live page must match.
PARTS = """() => {
  const text = (s) => document.querySelector(s)?.innerText.trim() ?? null;
  const box = document.querySelector('[data-run-state]');
  return {
    state: box && !box.hidden ? box.innerText.trim() : '',
    ahead: [...document.querySelectorAll('[data-run-ahead] a')]
      .map((a) => [a.getAttribute('href'), a.innerText.trim()]),
    note: text('[data-run-error]'),
    modelLink: text('[data-model-link]'),
    modelLinkHref: document.querySelector('[data-model-link]')?.getAttribute('href') ?? null,
    model: text('[data-model] [data-model-step]'),
    downloads: document.querySelectorAll('[data-model] [data-download]').length,
    attempt: text('[data-stat-attempt] .v'),
    wall: text('[data-stat="duration"]'),
    attempts: document.querySelector('[data-attempts]')?.hidden === false
      ? [...document.querySelectorAll('[data-attempt]')].map((r) => r.innerText.split('\\t').slice(3).join('|'))
      : null,
  };
}"""

PAUSED_NOTE = "paused at step 5 for a user's run; resumes after it, from where it was"
LIVE_TEXT = "document.querySelector('[data-live-text]').textContent"


def test_a_run_queued_again_while_open_shows_what_a_reload_shows(live, page, shots, ui):
    mine, demo = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{demo}/")
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    before = page.evaluate(PARTS)
    assert before["ahead"] == [] and before["note"] is None
    assert before["modelLink"] is None and before["model"] is None
    assert before["attempt"] == "1" and before["attempts"] is None

    live.script(PAUSE.format(demo=demo))
    # What the page learns from its stream (a backfill, as after a quiet spell).
    page.evaluate("window.__runStream.backfill()")
    ui.until(page, f"{LIVE_TEXT} === 'connected; queued again after step 5'")
    ui.until(
        page,
        "document.querySelector('[data-run-ahead] a')"
        " && document.querySelector('[data-model-link]')"
        " && document.querySelector('[data-run-error]')",
        15,
    )
    got = page.evaluate(PARTS)
    assert got["ahead"] == [[f"/runs/{mine}/", "open that run"]], got
    assert got["state"].startswith(
        "Queued: next to start: 'my <b>own</b> run' trains now"
    )
    assert page.locator("[data-run-state] b").count() == 0  # a name is text
    assert got["note"] == (
        "Note: paused at step 5 for a user's run; resumes after it, from where it was"
    )
    assert got["modelLink"] == "Model · step 5" and got["modelLinkHref"] == "#model"
    assert got["model"].startswith(
        "The checkpoint of step 5 (of 50: the newest so far)"
    )
    assert got["downloads"] >= 1
    # The Attempts table a reload shows (it was hidden: one attempt, nothing to say).
    assert got["attempts"] == [f"paused|{PAUSED_NOTE}"], got["attempts"]
    # Paused in the queue, its wall time stands still (the attempts' time, as the
    # server counts it): the same a few seconds on, and after the reload below.
    page.wait_for_timeout(2500)
    assert page.evaluate(PARTS)["wall"] == got["wall"]
    ui.shot(page, shots, "requeued_live", full=False)
    page.click("[data-run-ahead] a")  # it opens the run it waits behind
    page.wait_for_url(f"{live.url}/runs/{mine}/")
    page.goto(f"{live.url}/runs/{demo}/")  # a fresh render, not the back cache
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    reloaded = page.evaluate(PARTS)
    ui.shot(page, shots, "requeued_reloaded", full=False)
    assert reloaded == got
    page.guard.check()
    # No trainer plays them: ended here, not left for the session's cleanup.
    live.script(
        "from dashboard.models import Run, RunStatus\n"
        f"Run.objects.filter(pk__in=[{mine!r}, {demo!r}])"
        ".update(status=RunStatus.CANCELLED)\nprint(1)"
    )
