"""The stats strip above the charts stays current while a run is live (issue 11,
item 4): best reward and its step follow the stream, the wall time keeps counting, and
when the run ends the strip says what a fresh load of the page says."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _strip(page) -> dict[str, str]:
    return page.evaluate(
        "() => Object.fromEntries([...document.querySelectorAll('[data-stat]')]"
        ".map(n => [n.dataset.stat, n.textContent]))"
    )


def test_the_stats_strip_follows_a_live_run(scripted_live, page, shots, ui):
    base = scripted_live.url
    ui.login(page, base)
    page.goto(base + "/runs/new/")
    page.fill("[name=name]", "strip")
    page.fill("[name=steps]", "30")  # 30 x 0.4 s: about 12 s live
    page.click("[data-launch]")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f-]{36}/$"))
    run_id = page.url.rstrip("/").rsplit("/", 1)[1]

    ui.until(
        page, "Number(document.querySelector('[data-last-step]').textContent) >= 4", 60
    )
    early = _strip(page)
    page.wait_for_timeout(2500)
    later = _strip(page)
    assert later["duration"] != early["duration"], "the wall time stood still"

    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        90,
    )
    ui.until(
        page, "document.querySelector('[data-last-step]').textContent === '30'", 30
    )
    page.wait_for_timeout(1200)
    final = _strip(page)
    best = scripted_live.script(
        "from dashboard.reads import runs as q\n"
        "from dashboard.models import Run\n"
        f"s = q.run_stats(Run.objects.get(pk={run_id!r}))\n"
        "print(json.dumps([s.best_step, s.duration_s]))"
    )
    # The reward climbs (0.2 + 0.6 * progress + noise): the best is late in the run,
    # long after the step the page first showed.
    assert best[0] > 10
    assert final["best_step"] == f" (step {best[0]})"
    ui.shot(page, shots, "run_strip_after_live_run")

    page.wait_for_timeout(1500)
    assert _strip(page)["duration"] == final["duration"], "still counting after the end"
    page.reload()
    fresh = _strip(page)
    for key in ("last_reward", "best_reward", "best_step", "alerts"):
        assert fresh[key] == final[key], key
    page.guard.check()
