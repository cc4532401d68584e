"""A chart's legend lists what has points: an external run that sent ``reward`` and
``loss`` only had ``reward_std`` on its Reward chart's legend and ``policy_loss`` and
``grad_norm`` on its Loss chart's, none of which its trainer sends; a key that comes
later (``grad_norm`` from step 2) joins the legend live, without a reload."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LEGEND = (
    "[...document.querySelectorAll('[data-chart={chart}] .u-legend .u-series')]"
    ".filter(r => r.offsetParent !== null)"
    ".map(r => r.querySelector('.u-label').textContent)"
)


def test_the_legend_lists_the_keys_that_have_points(scripted_live, page, ui):
    base = scripted_live.url
    token = ui.new_token(page, base)
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"})
    made = api.post("/api/runs/external", json={"name": "legend", "framework": "trl"})
    assert made.status_code == 201, made.text
    run = made.json()["id"]

    def step(n: int, **metrics) -> None:
        event = {"type": "step", "step": n, "metrics": metrics}
        r = api.post(
            f"/api/runs/{run}/events",
            content=json.dumps(event) + "\n",
            headers={"content-type": "application/x-ndjson"},
        )
        assert r.status_code == 200, r.text

    step(1, reward=1.0, loss=0.5)
    page.goto(f"{base}/runs/{run}/")
    ui.until(page, "document.querySelector('[data-chart=loss] .u-legend')", 20)
    # Each chart's points come in their own answer (the reward chart's first).
    for chart in ("reward", "loss"):
        ui.until(page, f"{LEGEND.format(chart=chart)}.length > 1", 20)
    assert page.evaluate(LEGEND.format(chart="reward")) == ["step", "reward"]
    assert page.evaluate(LEGEND.format(chart="loss")) == ["step", "loss"]

    page.evaluate("window.__noReload = true")
    step(2, reward=0.9, loss=0.4, grad_norm=2.0)
    ui.until(page, f"{LEGEND.format(chart='loss')}.includes('grad_norm')", 20)
    assert page.evaluate(LEGEND.format(chart="loss")) == ["step", "loss", "grad_norm"]
    assert page.evaluate("window.__noReload") is True
    page.guard.check()
