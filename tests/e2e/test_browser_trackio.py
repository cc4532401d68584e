"""A trackio-streamed run in the browser: calls shaped as trackio's client sends them
(``bulk_log`` with a TRL config, TRL's metrics and its ``completions`` table) to
``/trackio/``, the run's live page drawing the steps as they arrive, its group
browser (the GRPO groups of a step, siblings by prompt) and its run group in the
runs list. The real client itself is ``tests/dashboard/test_trackio_client.py``."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_ID = uuid.uuid4().hex
CONFIG = {"num_generations": 2, "report_to": ["trackio"], "learning_rate": 1e-6}


def entries(step: int) -> list[dict]:
    rows = [
        {"step": step, "prompt": f"<i>{p}</i>", "completion": c, "says": r,
         "advantage": r - 0.5}
        for p, c, r in (("2+2?", "4", 1.0), ("2+2?", "<img src=x onerror=alert(1)>", 0.0),
                        ("3+3?", "6", 1.0), ("3+3?", "7", 0.0))
    ]  # fmt: skip
    base = {"project": "browser-grid", "run": "trl-via-trackio", "run_id": RUN_ID}
    return [
        {**base, "step": 2 * step, "log_id": uuid.uuid4().hex,
         "config": CONFIG if step == 1 else None,
         "metrics": {"train/reward": 0.1 * step, "train/kl": 0.01,
                     "train/global_step": step}},
        {**base, "step": 2 * step + 1, "log_id": uuid.uuid4().hex, "config": None,
         "metrics": {"completions": {"_type": "trackio.table", "_value": rows}}},
    ]  # fmt: skip


def test_a_trackio_streamed_run_is_live_and_browsable(scripted_live, page, shots, ui):
    base = scripted_live.url
    token = ui.new_token(page, base)
    trackio = httpx.Client(
        base_url=base + "/trackio/",
        headers={"x-trackio-write-token": token},
        timeout=30,
    )

    def bulk_log(step: int) -> None:
        r = trackio.post(
            "api/bulk_log", json={"args": [], "kwargs": {"logs": entries(step)}}
        )
        assert r.status_code == 200 and r.json()["error"] is None, r.text

    assert trackio.get("version").json()["api_version"] == 1
    bulk_log(1)
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"})
    (run,) = api.get("/api/runs?group=browser-grid").json()["runs"]
    assert run["framework"] == "trl"

    page.goto(f"{base}/runs/{run['id']}/")
    ui.until(page, "document.body.dataset.live === 'live'", 30)
    for step in range(2, 7):
        bulk_log(step)
        page.wait_for_timeout(150)
    ui.until(
        page,
        "Number(document.querySelector('[data-chart=reward]').dataset.points || 0) >= 6",
        30,
    )
    assert page.inner_text("[data-last-step]").strip() == "6"
    ui.shot(page, shots, "trackio_run_live")

    page.goto(f"{base}/runs/{run['id']}/trajectories/?step=6")
    assert "4 rollouts in 2 groups" in page.inner_text("main")  # siblings by prompt
    tasks = page.locator("[data-task-link]").all_inner_texts()
    assert len(tasks) == 2 and tasks[0] != tasks[1]
    ui.shot(page, shots, "trackio_group_browser")
    page.goto(f"{base}/runs/{run['id']}/trajectories/6/0/1/")
    assert "<i>2+2?</i>" in page.inner_text("main")  # the prompt, shown as text

    page.goto(f"{base}/runs/")
    page.click("[data-run-group]")
    page.wait_for_url("**/runs/?group=browser-grid")
    assert "trl-via-trackio" in page.inner_text("main")
    page.guard.check()  # the model's <img onerror> never ran
