"""Untrusted text in a real browser: 52 script-injection payloads placed in trajectory
text, tool output, sub-agent results, token strings, task ids, judge rationales, alert
messages and run names are shown as text on every page and when they arrive over the
websocket; no script runs (the dialog hook), nothing is blocked by the CSP (nothing was
injected for it to block), no element gains an event-handler attribute."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PAYLOADS_JS = "JSON.parse(document.getElementById('payloads').textContent)"
INJECTED = (
    "[...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on')))"
    ".length + document.querySelectorAll('img, iframe, object, embed, video, audio, marquee, frameset, math, "
    "base, meta[http-equiv], link[rel=import], form button[formaction], noscript p, template script').length"
)


def seen_payloads(page, payloads: list[str]) -> set[str]:
    text = page.evaluate("() => document.body.innerText")
    return {p for p in payloads if p in text}


def assert_clean(page) -> None:
    assert page.evaluate(f"() => {INJECTED}") == 0
    page.guard.check()


@pytest.fixture(scope="module")
def hostile(scripted_live):
    return scripted_live.script(
        "from django.contrib.auth import get_user_model\n"
        "from tests.fixtures.payloads import XSS_PAYLOADS\n"
        "from tests.fixtures.seed import seed_run\n"
        "a = get_user_model().objects.get(username='alice')\n"
        "r1 = seed_run(a, name=XSS_PAYLOADS[0], env='swarm', steps=12, payloads=True, alert_every=2)\n"
        "r2 = seed_run(a, name=XSS_PAYLOADS[1], env='search', steps=6, payloads=True, seed=4)\n"
        "print(json.dumps({'runs': [str(r1.pk), str(r2.pk)], 'payloads': XSS_PAYLOADS}))\n"
    )


def test_payloads_are_text_on_every_page(scripted_live, hostile, page, shots, ui):
    base = scripted_live.url
    payloads = hostile["payloads"]
    run, other = hostile["runs"]
    assert len(payloads) >= 50
    ui.login(page, base)
    seen: set[str] = set()
    pages = [
        ("untrusted_home", "/"),
        ("untrusted_runs", "/runs/"),
        ("untrusted_run", f"/runs/{run}/"),
        ("untrusted_compare", f"/compare/?runs={run},{other}"),
        ("untrusted_clone", f"/runs/{run}/clone/"),
        ("untrusted_critical_path", f"/runs/{run}/critical-path/?step=3"),
    ]
    pages += [
        (f"untrusted_trajectories_{s}", f"/runs/{run}/trajectories/?step={s}")
        for s in range(1, 13)
    ]
    pages += [
        (f"untrusted_trajectory_{s}_{g}_{i}", f"/runs/{run}/trajectories/{s}/{g}/{i}/")
        for s, g, i in [
            (1, 0, 0),
            (2, 1, 3),
            (5, 0, 2),
            (7, 1, 1),
            (9, 0, 3),
            (12, 1, 0),
        ]
    ]
    for name, url in pages:
        page.goto(base + url)
        if "/trajectories/" in url and re.search(r"/\d+/\d+/\d+/$", url):
            ui.until(page, "document.body.dataset.heatTokens !== undefined")
        if url.endswith(f"/runs/{run}/"):
            ui.until(page, "document.body.dataset.chartsReady === '1'")
        page.wait_for_timeout(150)
        seen |= seen_payloads(page, payloads)
        assert_clean(page)
        if not name.startswith(
            ("untrusted_trajectories_", "untrusted_trajectory_")
        ) or name.endswith(("_5", "_5_0_2")):
            ui.shot(page, shots, name)
    assert len(seen) >= 50, (
        f"only {len(seen)} of {len(payloads)} payloads were shown as text"
    )


def test_payloads_streamed_over_the_websocket_stay_text(scripted_live, page, shots, ui):
    base = scripted_live.url
    ui.login(page, base)
    page.goto(base + "/runs/new/")
    page.fill("[name=name]", "streamed payloads")
    page.fill("[name=steps]", "30")  # 12 s: alerts still stream after the page loads
    page.click("[data-launch]")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f-]{36}/$"))
    rendered = page.locator("[data-alerts] li").count()
    # The scripted trainer raises an alert every 3 steps whose message is a payload.
    ui.until(
        page,
        f"document.querySelectorAll('[data-alerts] li').length >= {rendered + 2}",
        60,
    )
    messages = page.locator("[data-alerts] li").all_text_contents()
    assert any(
        "<" in m and ("alert(" in m or "confirm(" in m or "prompt(" in m)
        for m in messages
    ), messages
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        60,
    )
    assert page.evaluate("window.__runStream.stats.frames") > 0
    ui.shot(page, shots, "untrusted_websocket_alerts")
    assert_clean(page)
