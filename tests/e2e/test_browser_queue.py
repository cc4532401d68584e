"""A newcomer's run before step 1 (issue 22, items 5 and 6): a queued run's page
says where it stands in line and behind what, updated while it waits; a running
run's page shows its warm start as the real trainer reports it."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from django.utils import timezone
from dashboard.models import Run, RunStatus
alice = get_user_model().objects.get(username="alice")
demo = Run.objects.create(
    owner=alice, name="demo: swarm, live for a while", demo=True,
    config={"steps": 1500, "env": {"name": "swarm"}}, status=RunStatus.RUNNING,
    last_step=412, started_at=timezone.now(), heartbeat_at=timezone.now(),
)
mine = Run.objects.create(
    owner=alice, name="my <b>first</b> run", config={"steps": 200,
    "model": {"warmstart_steps": 300}, "env": {"name": "calc"}},
)
print(json.dumps([str(demo.pk), str(mine.pk)]))
"""


def _chart_placeholder(page, chart: str) -> str:
    """The chart's placeholder once its series were read (until then, under load,
    it says "Loading…")."""
    sel = f"[data-chart='{chart}'] [data-nodata]"
    page.wait_for_function(
        "(sel) => { const n = document.querySelector(sel);"
        " return n && !n.textContent.includes('Loading'); }",
        arg=sel,
    )
    return page.inner_text(sel)


def _charts_notice(page) -> str | None:
    """The one notice in place of the charts (their grid hidden), or None when the
    charts show."""
    return page.evaluate(
        "() => { const n = document.querySelector('[data-charts-waiting]');"
        " const grid = document.querySelector('[data-charts]');"
        " if (!n || n.hidden) return null;"
        " return grid.getClientRects().length ? 'grid shown too' : n.textContent; }"
    )


def _state(page) -> str:
    return page.evaluate(
        "() => { const b = document.querySelector('[data-run-state]');"
        " return b && !b.hidden ? b.textContent : ''; }"
    )


def test_a_queued_run_says_where_it_stands_then_shows_its_warm_start(
    live, page, shots, ui
):
    demo_id, run_id = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run_id}/")
    text = _state(page)
    assert "Queued: next to start: 'demo: swarm, live for a while' trains now" in text
    assert "(step 412 of 1500), a demo that pauses for your run" in text
    # The name is the user's text: shown as typed, never as markup.
    assert page.locator("h1 b").count() == 0 and "<b>" in page.inner_text("h1")
    # The empty charts say why they are empty instead of "No data yet.": one
    # notice in their place.
    assert _chart_placeholder(page, "reward") == (
        "Queued: charts begin at step 1, once the run starts."
    )
    assert (
        _charts_notice(page) == "Queued: charts begin at step 1, once the run starts."
    )
    ui.shot(page, shots, "queue_queued_run")
    # The run ahead moves on: the page follows without a reload.
    live.script(
        "from dashboard.models import Run\n"
        f"Run.objects.filter(pk={demo_id!r}).update(last_step=430)\n"
        "print(1)"
    )
    ui.until(
        page,
        "document.querySelector('[data-run-state]').textContent"
        ".includes('step 430 of 1500')",
    )
    # It starts: the warm start's progress replaces the place in line.
    live.script(
        "from dashboard.models import Run, RunStatus\n"
        f"Run.objects.filter(pk={demo_id!r}).update(status=RunStatus.CANCELLED)\n"
        f"Run.objects.filter(pk={run_id!r}).update(status=RunStatus.RUNNING,"
        " warmup={'done': 120, 'of': 300, 'loss': 1.2})\n"
        "print(1)"
    )
    ui.until(
        page,
        "document.querySelector('[data-run-state]').textContent"
        ".includes('warm start: 120 of 300 steps')",
    )
    assert "Before step 1:" in _state(page)
    assert _chart_placeholder(page, "reward") == (
        "Warm start 120 of 300: charts begin at step 1."
    )
    assert _charts_notice(page) == "Warm start 120 of 300: charts begin at step 1."
    # A chart empty for a reason of its own keeps it (this run has no KL term).
    assert "No KL penalty" in _chart_placeholder(page, "kl")
    assert "calc episodes have none" in _chart_placeholder(page, "critical")
    ui.shot(page, shots, "queue_warm_start_seeded")
    runs = page.goto(f"{live.url}/runs/")
    assert runs.ok
    assert page.locator(f"[data-run-row='{run_id}'] [data-warmup]").inner_text() == (
        "warm start 120/300"
    )


def test_a_run_queued_again_after_its_steps_does_not_say_charts_begin_at_step_1(
    live, page, ui
):
    """A demo paused for a user's run is queued again at step 412: a chart that
    has nothing yet says so, not that charts begin at step 1."""
    demo_id, _ = live.script(SEED)
    live.script(
        "from dashboard.models import Run, RunStatus\n"
        f"Run.objects.filter(pk={demo_id!r}).update(status=RunStatus.QUEUED)\n"
        "print(1)"
    )
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{demo_id}/")
    assert _chart_placeholder(page, "reward") == (
        "Queued after step 412: nothing recorded here yet; "
        "the run goes on when it starts again."
    )
    assert _charts_notice(page) == (
        "Queued after step 412: nothing recorded here yet; "
        "the run goes on when it starts again."
    )


def test_the_real_trainers_warm_start_streams_to_the_page(live, page, shots, ui):
    token = live.script(
        "from django.contrib.auth import get_user_model\n"
        "from dashboard.site import tokens\n"
        "alice = get_user_model().objects.get(username='alice')\n"
        "print(json.dumps(tokens.do_create_token(alice, 'e2e-queue')[1]))"
    )
    config = {
        "name": "warm start live",
        "steps": 2,
        "env": {"name": "calc"},
        # Long enough to report twice however fast the machine (a report after the
        # first step, then every 5 s): 400 steps once ended between two reports on
        # a quiet machine, and the page never showed a second count. Cancelled below.
        "model": {"size": "tiny", "device": "cpu", "warmstart_steps": 10000,
                  "warmstart_batch": 2},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    }  # fmt: skip
    req = urllib.request.Request(
        f"{live.url}/api/runs",
        json.dumps({"config": config}).encode(),
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    run_id = json.loads(urllib.request.urlopen(req, timeout=60).read())["id"]
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run_id}/")
    first = ui.until(
        page,
        "(document.querySelector('[data-run-state-text]').textContent"
        ".match(/warm start: (\\d+) of 10000 steps/) || [])[1]",
        timeout=300,
    )
    # The banner's text, read in the same look that saw the count pass ``first``:
    # on a fast machine the warm start ends (and the banner moves on) right after.
    later = ui.until(
        page,
        "(() => { const b = document.querySelector('[data-run-state]');"
        " const t = b && !b.hidden ? b.textContent : '';"
        " const m = t.match(/warm start: (\\d+) of 10000/);"
        f" return m && Number(m[1]) > {int(first)} ? t : null; }})()",
        timeout=300,
    )
    assert re.search(r"warm start: \d+ of 10000 steps", later)
    ui.shot(page, shots, "queue_warm_start_live")
    # Cancelled, so that the server's one executor is free for the next test.
    req = urllib.request.Request(
        f"{live.url}/api/runs/{run_id}/cancel",
        b"",
        {"Authorization": f"Bearer {token}"},
        method="POST",
    )
    urllib.request.urlopen(req, timeout=60).read()
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'cancelled'",
        timeout=120,
    )
    # Its charts say where it stopped, not "No data yet." (none will come); a
    # reload says the same.
    stopped = re.compile(
        r"Stopped at warm start \d+ of 10000 \(cancelled\): no RL step ran, so "
        r"nothing was charted\."
    )
    assert stopped.fullmatch(_chart_placeholder(page, "reward"))
    assert stopped.fullmatch(_charts_notice(page) or "")
    ui.shot(page, shots, "queue_warm_start_cancelled")
    page.reload()
    assert stopped.fullmatch(_chart_placeholder(page, "reward"))
    assert stopped.fullmatch(_charts_notice(page) or "")
    assert not page.guard.dialogs
