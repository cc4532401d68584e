"""A run page before there is anything to chart (queued, warming up, ended before step
1) showed a dozen empty chart cards ~400 px tall, each saying the same sentence: one
notice says it in their place now, the charts still in the page (hidden) for the
script to bring back with the first step (``static/js/run_waiting.js`` says the same
sentences as the run moves on)."""

from __future__ import annotations

import re

import pytest
from dashtest import client_for

from dashboard.ingest import writer
from dashboard.models import Run, RunStatus

pytestmark = pytest.mark.django_db

QUEUED = "Queued: charts begin at step 1, once the run starts."


def _page(owner, run) -> str:
    return client_for(owner).get(f"/runs/{run.pk}/").content.decode()


def _notice(html: str) -> str | None:
    """The notice's text when shown, else None."""
    m = re.search(r"<p class=\"empty\" data-charts-waiting( hidden)?>([^<]*)</p>", html)
    assert m, "no notice element"
    return None if m.group(1) else m.group(2)


def _grid_hidden(html: str) -> bool:
    grid = re.search(r"<div class=\"grid\" data-charts( hidden)?>", html)
    tools = re.search(r"data-chart-tools( hidden)?>", html)
    assert grid and tools
    assert bool(grid.group(1)) == bool(tools.group(1))
    return bool(grid.group(1))


def _run(owner, tiny_config, **fields) -> Run:
    return Run.objects.create(owner=owner, name="r", config=tiny_config, **fields)


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({}, QUEUED),
        (
            {"status": RunStatus.RUNNING, "warmup": {"done": 120, "of": 300}},
            "Warm start 120 of 300: charts begin at step 1.",
        ),
        ({"status": RunStatus.RUNNING}, "Starting: charts begin at step 1."),
        (
            {"status": RunStatus.CANCELLED, "warmup": {"done": 9, "of": 500}},
            "Stopped at warm start 9 of 500 (cancelled): no RL step ran, so nothing "
            "was charted.",
        ),
        (
            {"status": RunStatus.CANCELLED},
            "Stopped before step 1 (cancelled): no RL step ran, so nothing was "
            "charted.",
        ),
        (
            {"status": RunStatus.QUEUED, "last_step": 412},
            "Queued after step 412: nothing recorded here yet; the run goes on when "
            "it starts again.",
        ),
    ],
)
def test_one_notice_stands_in_for_the_charts_before_any_metric(
    owner, tiny_config, fields, text
):
    html = _page(owner, _run(owner, tiny_config, **fields))
    assert _notice(html) == text
    assert _grid_hidden(html)
    # The charts are in the page still, for the script to bring back.
    assert html.count("data-chart=") >= 10
    # Said once, outside the hidden cards (which may say it too, unseen).
    assert html.split('<div class="grid" data-charts')[0].count(f">{text}<") == 1


def test_charts_show_once_a_metric_is_there(owner, tiny_config):
    run = _run(owner, tiny_config, status=RunStatus.RUNNING, last_step=1)
    writer.store(run.pk, [{"type": "step", "step": 1, "metrics": {"reward": 0.5}}])
    html = _page(owner, run)
    assert _notice(html) is None and not _grid_hidden(html)
    # Queued again after its steps, with its metrics: its charts, no notice.
    Run.objects.filter(pk=run.pk).update(status=RunStatus.QUEUED)
    html = _page(owner, run)
    assert _notice(html) is None and not _grid_hidden(html)


def test_an_external_run_that_sent_metrics_at_step_0_shows_them(owner):
    run = Run.objects.create(
        owner=owner, name="e", config={}, external=True, status=RunStatus.RUNNING
    )
    writer.store(run.pk, [{"type": "step", "step": 0, "metrics": {"loss": 1.0}}])
    html = _page(owner, run)
    assert _notice(html) is None and not _grid_hidden(html)


def test_a_run_that_succeeded_with_nothing_is_as_before(owner, tiny_config):
    html = _page(owner, _run(owner, tiny_config, status=RunStatus.SUCCEEDED))
    assert _notice(html) is None and not _grid_hidden(html)
