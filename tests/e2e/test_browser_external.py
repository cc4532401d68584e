"""An external run in the browser: a token made on /settings/tokens/, a run created
and fed over the HTTP API, its live page drawing the steps as they arrive."""

from __future__ import annotations

import json
import math

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def step_events(step: int) -> list[dict]:
    events = [
        {
            "type": "step",
            "step": step,
            "metrics": {
                "reward": 0.1 * step,
                "rewards/correct/mean": 0.05 * step,
                "critic/score/mean": 0.1 * step,
                "entropy": 1.0 / step,
            },
        }
    ]
    for index in range(2):
        events.append(
            {
                "type": "trajectory",
                "step": step,
                "group": 0,
                "index": index,
                "task_id": f"p-{step}",
                "reward": float(index),
                "advantage": index - 0.5,
                "rewards": {
                    "total": float(index),
                    "components": {"correct": float(index)},
                },
                "num_turns": 1,
                "segments": [
                    {
                        "turn": 0,
                        "kind": "prompt",
                        "text": "What is 2+2?",
                        "mask": "prompt",
                    },
                    {
                        "turn": 0,
                        "kind": "action",
                        "text": "<img src=x onerror=alert(1)> 4",
                    },
                ],
            }
        )
    return events


def test_an_external_run_streams_into_its_live_page(scripted_live, page, shots, ui):
    base = scripted_live.url
    ui.login(page, base)
    page.goto(base + "/settings/tokens/")
    page.fill("input[name=name]", "browser test")
    page.click("button[type=submit].primary")
    token = page.inner_text("[data-new-token]").strip()
    assert token.startswith("arl_")
    ui.shot(page, shots, "tokens_created")

    http = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    r = http.post(
        "/api/runs/external",
        json={"name": "verl-import", "framework": "verl", "config": {"lr": 1e-6}},
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    http.post(f"/api/runs/{run_id}/events", content=_ndjson(step_events(1)))

    page.goto(f"{base}/runs/{run_id}/")
    ui.until(page, "document.body.dataset.live === 'live'", 30)
    for step in range(2, 9):
        r = http.post(f"/api/runs/{run_id}/events", content=_ndjson(step_events(step)))
        assert r.status_code == 200 and r.json()["accepted"] == 3
        page.wait_for_timeout(150)
    ui.until(
        page,
        "Number(document.querySelector('[data-chart=reward]').dataset.points || 0) >= 8",
        30,
    )
    assert page.inner_text("[data-last-step]").strip() == "8"
    # verl's own metric names get charts of their own.
    assert page.locator("[data-chart^=extra-]").count() >= 1
    assert "verl (external)" in page.inner_text("main")
    ui.shot(page, shots, "external_run_live")

    http.post(
        f"/api/runs/{run_id}/events",
        content=_ndjson([{"type": "run_finished", "status": "succeeded"}]),
    )
    ui.until(
        page,
        "document.querySelector('[data-run-status]').innerText.includes('succeeded')",
        30,
    )
    page.goto(f"{base}/runs/{run_id}/trajectories/8/0/1/")
    assert "What is 2+2?" in page.inner_text("main")
    ui.shot(page, shots, "external_trajectory")
    page.guard.check()  # the model's <img onerror> never ran


def _ndjson(events) -> bytes:
    return "".join(
        json.dumps(e, allow_nan=False) + "\n" for e in events if not _nan(e)
    ).encode()


def _nan(event) -> bool:
    return any(
        isinstance(v, float) and math.isnan(v)
        for v in (event.get("metrics") or {}).values()
    )
