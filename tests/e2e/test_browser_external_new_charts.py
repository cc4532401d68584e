"""An external run's page left open while its client starts logging new metrics: the
charts a reload would show for them (a new prefix, a reward component, held-out
evaluation) appear live with their points, in the reload's order with its ids and
titles, while the charts already there keep their points; a metric name is shown as
text, whatever it holds. Before, a name first sent after the render only joined the
"any metric" picker: its chart came with a reload."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Each chart section of the page: id, title, points drawn, keys plotted.
CHARTS = """[...document.querySelectorAll('[data-charts] [data-chart]')].map((s) => [
  s.dataset.chart,
  s.querySelector('h3 > span').textContent,
  s.dataset.points || '0',
  (window.__runCharts.find((c) => c.section === s)?.keys || []).join(','),
])"""
HOSTILE = "<img src=x onerror=alert(1)>/m"


class Sender:
    """An external run made over the events API (a token from the tokens page)."""

    def __init__(self, page, ui, base: str, name: str):
        token = ui.new_token(page, base)
        self.http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        r = self.http.post("/api/runs/external", json={"name": name})
        assert r.status_code == 201, r.text
        self.run = r.json()["id"]

    def step(self, step: int, metrics: dict) -> None:
        event = {"type": "step", "step": step, "metrics": metrics}
        r = self.http.post(
            f"/api/runs/{self.run}/events", content=json.dumps(event) + "\n"
        )
        assert r.status_code == 200, r.text


def charts(page) -> list[list[str]]:
    return page.evaluate(CHARTS)


def reloaded(page, ui, want: list[list[str]]) -> list[list[str]]:
    """The charts after a reload, once they show ``want`` (a chart's points are
    counted when it draws, which may come a frame after ``chartsReady``: a loaded
    machine once read 0 there); what they show after 15 s otherwise."""
    page.reload()
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    try:
        same = f"JSON.stringify({CHARTS}) === {json.dumps(json.dumps(want))}"
        ui.until(page, same, 15)
    except AssertionError:
        pass  # the caller's comparison says what differs
    return charts(page)


def test_new_metrics_get_their_charts_live(live, page, shots, ui):
    send = Sender(page, ui, live.url, "grows charts")
    send.step(1, {"train/reward": 0.1, "train/loss": 1.0})
    page.goto(f"{live.url}/runs/{send.run}/")
    ui.until(page, "document.body.dataset.live === 'live'")
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    assert charts(page) == [
        ["reward", "Reward", "1", "train/reward"],
        ["extra-train", "train/", "1", "train/loss"],
    ]
    page.evaluate(
        "window.__kept = window.__runCharts.filter((c) => c.section?.dataset.chart)"
    )
    # A new prefix sorted before train/ (whose chart keeps its id: ids name the
    # prefix, not its place), a component, held-out evaluation, and a name that is
    # markup.
    send.step(
        2,
        {
            "train/reward": 0.2,
            "train/loss": 0.5,
            "critic/vf_loss": 3.0,
            "rewards/foo/mean": 0.4,
            "eval/reward": 0.6,
            HOSTILE: 1.5,
        },
    )
    ui.until(page, "document.querySelectorAll('[data-chart]').length === 6", 15)
    ui.until(
        page,
        "[...document.querySelectorAll('[data-chart]')].every((s) => s.dataset.points > 0)",
        15,
    )
    live_charts = charts(page)
    # an odd prefix's chart by a hash of it (dashboard.pages.charts.extra_id)
    digest = hashlib.sha1(HOSTILE.split("/")[0].encode()).hexdigest()[:8]
    hostile = f"extra-x-{digest}"
    assert [c[0] for c in live_charts] == [
        "reward",
        "components",
        "eval",
        hostile,
        "extra-critic",
        "extra-train",
    ]
    shown = {c[0]: c for c in live_charts}
    assert shown[hostile][1] == "<img src=x onerror=alert(1)>/"  # as text
    assert shown["extra-train"] == ["extra-train", "train/", "2", "train/loss"]
    assert shown["reward"][2] == "2"
    # The charts there before are the same objects, their points kept (step 1 came
    # from the metrics API at load, step 2 live), the train/ one under its id.
    assert page.evaluate(
        "window.__kept.every((c) => window.__runCharts.includes(c) && c.size === 2)"
    )
    assert (
        page.evaluate(
            "document.querySelector('[data-chart=extra-train]')"
            ".getAttribute('aria-labelledby')"
        )
        == "chart-extra-train-h"
    )
    assert page.evaluate("document.querySelector('[data-charts] img')") is None
    ui.shot(page, shots, "external_new_charts_live", full=False)

    # A component more: the components chart plots both, with every point.
    send.step(
        3, {"train/reward": 0.3, "rewards/bar/mean": 0.1, "rewards/foo/mean": 0.5}
    )
    ui.until(
        page,
        "document.querySelector('[data-chart=components]') && window.__runCharts.find("
        "(c) => c.section?.dataset.chart === 'components')?.keys.length === 2",
        15,
    )
    ui.until(
        page, "document.querySelector('[data-chart=components]').dataset.points === '2'"
    )
    live_charts = charts(page)
    assert live_charts == reloaded(page, ui, live_charts)  # ids, titles, points, keys
    assert page.evaluate("document.querySelector('[data-charts] img')") is None
    page.guard.check()


def test_a_run_that_had_sent_nothing_gets_its_charts(live, page, ui):
    """Opened before its client sent anything: no chart at all, one notice; its
    first metrics bring their charts without a reload."""
    send = Sender(page, ui, live.url, "nothing yet")
    page.goto(f"{live.url}/runs/{send.run}/")
    ui.until(page, "document.body.dataset.live === 'live'")
    assert charts(page) == []
    send.step(1, {"reward": 0.5, "entropy": 1.0, "critic/score/mean": 0.2})
    ui.until(page, "document.querySelectorAll('[data-chart]').length === 3", 15)
    ui.until(
        page,
        "[...document.querySelectorAll('[data-chart]')].every((s) => s.dataset.points === '1')",
        15,
    )
    assert page.evaluate("document.querySelector('[data-charts]').hidden") is False
    live_charts = charts(page)
    assert [c[:2] for c in live_charts] == [
        ["reward", "Reward"],
        ["entropy", "Entropy"],
        ["extra-critic", "critic/"],
    ]
    assert live_charts == reloaded(page, ui, live_charts)
    page.guard.check()
