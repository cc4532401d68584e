"""The live run page under stress: a dropped connection and a gap in the frame
numbers are repaired by backfilling from the API, so the chart ends with every step;
plus keyboard use, a narrow window, dark mode, and a 4,000-token heatmap."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def launch(page, base: str, steps: int, name: str) -> str:
    page.goto(base + "/runs/new/")
    page.fill("[name=name]", name)
    page.fill("[name=steps]", str(steps))
    page.click("[data-launch]")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f-]{36}/$"))
    return page.url.rstrip("/").rsplit("/", 1)[1]


def test_reconnects_and_seq_gaps_are_backfilled(scripted_live, page, shots, ui):
    base = scripted_live.url
    ui.login(page, base)
    # Long enough (60 steps x 0.4 s) that frames still flow after the reconnect, even
    # on a loaded machine: a gap is only seen on the frame after it.
    launch(page, base, 60, "resilient")
    # Points on the chart and the stream's first hello handled (the stream starts
    # only once the charts have loaded).
    ui.until(
        page,
        "Number(document.querySelector('[data-chart=reward]').dataset.points || 0) >= 3"
        " && window.__runStream.stats.hellos >= 1",
        60,
    )

    # The socket drops: the stream reconnects by itself and catches up (the server's
    # hello after the reconnect has been handled: its backfill is done).
    hellos = page.evaluate(
        "() => { const s = window.__runStream; s.ws.close(); return s.stats.hellos; }"
    )
    ui.until(
        page,
        "window.__runStream.stats.reconnects >= 1"
        f" && window.__runStream.stats.hellos > {hellos}"
        " && document.body.dataset.live === 'live'",
        30,
    )

    # Frames go missing (a full channel drops them silently): the next frame's seq
    # shows the gap and the page backfills what it missed. The stream is made to forget
    # three frames once everything it has received is handled, in the same task, so no
    # backfill in flight can put the number back.
    before = page.evaluate(
        "async () => { const s = window.__runStream; await s.settled();"
        " s.seq -= 3; return s.stats.backfills; }"
    )
    ui.until(page, "window.__runStream.stats.gaps >= 1", 30)
    ui.until(page, f"window.__runStream.stats.backfills > {before}", 30)

    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        90,
    )
    ui.until(
        page,
        "document.querySelector('[data-chart=reward]').dataset.points === '60'",
        30,
    )
    stats = page.evaluate("() => window.__runStream.stats")
    assert stats["backfills"] >= 2, stats
    assert page.text_content("[data-last-step]") == "60"
    ui.shot(page, shots, "live_after_reconnect_and_gap")
    page.guard.check()


@pytest.fixture(scope="module")
def seeded(scripted_live):
    return scripted_live.script(
        "from django.contrib.auth import get_user_model\n"
        "from tests.fixtures.seed import seed_run\n"
        "a = get_user_model().objects.get(username='alice')\n"
        "r = seed_run(a, name='keyboard', env='swarm', steps=6)\n"
        "big = seed_run(a, name='long trajectory', env='search', steps=1, groups=1, group_size=1, tokens=4000)\n"
        "print(json.dumps({'run': str(r.pk), 'big': str(big.pk)}))\n"
    )


def test_keyboard_moves_through_trajectories(scripted_live, seeded, page, shots, ui):
    base = scripted_live.url
    ui.login(page, base)
    page.goto(f"{base}/runs/{seeded['run']}/trajectories/?step=3")
    page.keyboard.press("/")
    assert page.evaluate("() => document.activeElement.hasAttribute('data-filter')")
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    page.keyboard.press("j")
    focused = page.evaluate("() => document.activeElement.getAttribute('href')")
    assert focused.endswith("/trajectories/3/0/1/")
    outline = page.evaluate(
        "() => getComputedStyle(document.activeElement).outlineStyle"
    )
    assert outline != "none"  # a visible focus ring
    ui.shot(page, shots, "keyboard_focus_ring", full=False)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/trajectories/3/0/1/$"))
    page.keyboard.press("j")
    page.wait_for_url(re.compile(r".*/trajectories/3/0/2/$"))
    page.keyboard.press("k")
    page.wait_for_url(re.compile(r".*/trajectories/3/0/1/$"))
    page.guard.check()


def test_narrow_window_and_dark_mode(browser, scripted_live, seeded, shots, ui):
    for scheme, width in (("light", 420), ("dark", 1280)):
        ctx = browser.new_context(
            viewport={"width": width, "height": 900}, color_scheme=scheme
        )
        page = ctx.new_page()
        guard = ui.Guard(page)
        ui.login(page, scripted_live.url)
        for name, url in (
            ("run", f"/runs/{seeded['run']}/"),
            ("trajectory", f"/runs/{seeded['run']}/trajectories/2/1/1/"),
            ("new", "/runs/new/"),
            ("runs", "/runs/"),
        ):
            page.goto(scripted_live.url + url)
            page.wait_for_timeout(600)
            overflow = page.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 1, f"{url} overflows a {width}px window by {overflow}px"
            ui.shot(page, shots, f"{scheme}_{width}_{name}")
        guard.check()
        ctx.close()


def test_a_4000_token_heatmap_renders_without_freezing(
    scripted_live, seeded, page, shots, ui
):
    ui.login(page, scripted_live.url)
    page.goto(f"{scripted_live.url}/runs/{seeded['big']}/trajectories/1/0/0/")
    tokens = int(ui.until(page, "document.body.dataset.heatTokens"))
    assert tokens >= 4000
    ms = float(page.evaluate("() => document.body.dataset.heatMs"))
    assert ms < 1000, f"heatmap took {ms} ms"
    assert page.locator("[data-heat] span").count() == tokens
    page.locator("[data-heat] span").nth(2500).hover()
    assert "advantage" in page.text_content("[data-tooltip]")
    recolour = page.evaluate(
        "() => { const t = performance.now(); const s = document.querySelector('[data-colour-by]');"
        " s.value = 'entropy'; s.dispatchEvent(new Event('change')); return performance.now() - t; }"
    )
    assert recolour < 500
    ui.shot(page, shots, "heatmap_4000_tokens", full=False)
    page.guard.check()


def test_the_form_follows_the_environment_and_checks_as_you_type(
    scripted_live, page, shots, ui
):
    ui.login(page, scripted_live.url)
    page.goto(scripted_live.url + "/runs/new/")
    # Switching environment swaps in its parameters and its default reward (PARL).
    page.check("input[name='env.name'][value='swarm']")
    ui.until(
        page,
        "document.querySelector('[data-reward-section]').dataset.env === 'swarm'",
        20,
    )
    assert page.is_visible("[data-env-params=swarm]") and not page.is_visible(
        "[data-env-params=calc]"
    )
    kinds = page.eval_on_selector_all(
        "[data-component-row] select[name$='.name']", "els => els.map(e => e.value)"
    )
    assert kinds[:3] == ["r_perf", "r_parallel", "r_finish"]
    assert page.input_value("[name='reward.components.1.schedule.kind']") == "linear"
    # Add a component and make it F-beta: its beta parameter appears.
    page.click("[data-add-component]")
    last = page.locator("[data-component-row]").last
    index = last.get_attribute("data-index")
    last.locator("select[name$='.name']").select_option("fbeta")
    assert page.input_value(f"[name='reward.components.{index}.params.beta']") == "4.0"
    # A judge with a rubric dimension.
    page.click("[data-add-judge]")
    judge = page.locator("[data-judge-row]").last
    judge.locator("input[name$='.name']").first.fill("strict")
    judge.locator("[data-dimension-row] input[name$='.name']").fill("success")
    # The live check files errors under their inputs before anything is submitted:
    # F-beta reads search facts, which swarm does not produce.
    ui.until(
        page,
        f"document.querySelector('[data-errors-for=\"reward.components.{index}\"]').textContent.includes('does not produce')",
        20,
    )
    page.fill("[name='rollout.group_size']", "1")
    ui.until(
        page,
        "document.querySelector('[data-errors-for=\"rollout.group_size\"]').textContent.includes('greater than or equal to 2')",
        20,
    )
    ui.shot(page, shots, "new_run_live_check")
    page.guard.check()


def test_a_quiet_stream_still_brings_the_final_status(scripted_live, page, ui):
    """Issue 21, item 8: the socket stays open but no frame comes after the hello (the
    server's channel layer lost them). The page asks the database when its stream is
    quiet, and shows the run's steps and its final status anyway."""
    base = scripted_live.url
    ui.login(page, base)

    def deaf(ws) -> None:  # pass the hello, drop every later message from the server
        server = ws.connect_to_server()
        passed = []

        def from_server(message) -> None:
            if not passed:
                passed.append(message)
                ws.send(message)

        server.on_message(from_server)

    page.route_web_socket(re.compile(r".*/ws/runs/"), deaf)
    launch(page, base, 40, "deaf")  # 40 x 0.4 s: still running after the hello
    ui.until(page, "window.__runStream && window.__runStream.stats.hellos >= 1", 60)
    page.evaluate("() => { window.__runStream.quietMs = 1000; }")
    badge = "[data-run-status] .badge"
    assert page.text_content(badge) in ("queued", "running")
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        90,
    )
    stats = page.evaluate("() => window.__runStream.stats")
    assert stats["frames"] == 0 and stats["polls"] >= 1, stats
    assert page.text_content("[data-last-step]") == "40"
    page.guard.check()
