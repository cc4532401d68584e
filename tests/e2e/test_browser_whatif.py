"""The what-if panel in a real browser: on a stored swarm run, set r_parallel to 0,
see advantage sign flips and an example linking to its trajectory, open the clone form
filled with the new weights, review it and launch the clone (its config carries
them); then open a group and follow its task across steps (issue 12.3)."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = r"""
import random
from dashboard.ingest import writer
from dashboard.runs import services
from dashboard.models import Run
from dashboard.reads.whatif import run_setup
from django.contrib.auth import get_user_model
from rewards.schedule import weight_at

owner = get_user_model().objects.get(username="alice")
cfg = services.check_config({
    "name": "swarm what-if", "env": {"name": "swarm"},
    "algorithm": {"preset": "grpo"}, "model": {"size": "tiny", "device": "cpu"},
    "rollout": {"tasks_per_step": 3, "group_size": 4, "max_turns": 2},
})
run = Run.objects.create(owner=owner, name="swarm what-if", status="succeeded",
                         queue="cpu", config=cfg.model_dump(mode="json"), last_step=6)
_, _, rcfg, _ = run_setup(run)
rng = random.Random(1)
batch = writer.Batch()
for step in range(1, 7):
    for group in range(3):
        for index in range(4):
            per_step = {
                c.key: [weight_at(c.weight, c.schedule, step) * rng.choice(
                    (0.0, 1.0, 2.0) if c.key == "r_parallel" else (0.0, 0.25))
                    for _ in "ab"]
                for c in rcfg.components
            }
            comps = {k: sum(v) for k, v in per_step.items()}
            total = sum(comps.values())
            batch.add(run.id, {
                "type": "trajectory", "step": step, "group": group, "index": index,
                "task_id": f"task-{group}", "reward": total, "advantage": 0.0,
                "rewards": {"total": total, "components": comps, "per_step": per_step},
                "num_turns": 2, "length": 8, "facts": {"action_tokens": [4, 4]},
                "segments": [{"turn": 0, "kind": "action", "text": "spawn",
                              "token_ids": [1, 2], "tokens": ["sp", "awn"], "mask": None}],
            })
writer.write(run.id, batch)
print(json.dumps(str(run.pk)))
"""


def test_reweight_a_swarm_run_and_launch_the_clone(live, page, shots, ui):
    run_id = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run_id}/")
    panel = page.locator("#whatif")
    assert panel.locator("[data-weight=r_parallel]").input_value() == "0.3"
    panel.locator("[data-whatif-run]").click()  # own weights first: nothing changes
    page.wait_for_selector("[data-whatif-result]:not([hidden])")
    assert (
        "0 of 72 trained trajectories change their advantage's sign"
        in page.text_content("#whatif [data-whatif-summary]")
    )
    assert panel.locator("[data-whatif-examples] tbody tr").count() == 0
    assert panel.locator("[data-whatif-none]").is_visible()  # said, not an empty table
    assert not panel.locator("[data-whatif-examples]").is_visible()
    # The run's own weights change nothing: no "direction" sentence about them.
    assert "No direction changes" not in page.text_content(
        "#whatif [data-whatif-summary]"
    )

    # A blank weight is no weight (not 0): the server's error goes beside the field
    # it names, which is marked invalid (a walk read it under the buttons, by the
    # API's name); typing clears it, as it is about the weights it was given.
    field = panel.locator("[data-weight=r_parallel]")
    field.fill("")
    panel.locator("[data-whatif-run]").click()
    beside = panel.locator("[data-weight-error=r_parallel]")
    beside.wait_for(state="visible")
    assert beside.text_content().startswith("must be a number")
    assert field.get_attribute("aria-invalid") == "true"
    assert not panel.locator("[data-whatif-error]").is_visible()
    assert panel.locator("[data-whatif-clone]").is_disabled()
    ui.shot(page, shots, "whatif_00_blank_weight", full=False)
    field.fill("1e999")  # the browser refuses it itself: nothing is sent
    assert panel.locator("[data-weight-error]").count() == 0
    assert field.get_attribute("aria-invalid") is None

    panel.locator("[data-weight=r_parallel]").fill("0")
    panel.locator("[data-whatif-run]").click()
    page.wait_for_selector("#whatif tr[data-kind=sign_flip]")
    assert not panel.locator("[data-whatif-none]").is_visible()
    summary = page.text_content("#whatif [data-whatif-summary]")
    flips = int(re.match(r"(\d+) of 72", summary).group(1))
    assert flips > 0
    assert (
        "mean Kendall τ" in summary
        and panel.locator("[data-whatif-tau-help]").is_visible()
    )
    # The list says how many of the changes it shows; asked, it shows them all.
    rows = panel.locator("[data-whatif-examples] tbody tr")
    shown = panel.locator("[data-whatif-shown]").text_content()
    cut = re.match(r"(\d+) of (\d+) changes shown", shown)
    assert cut and int(cut.group(1)) == rows.count() < int(cut.group(2)), shown
    panel.locator("[data-whatif-more]").click()
    ui.until(
        page,
        f"document.querySelectorAll('#whatif [data-whatif-examples] tbody tr').length == {cut.group(2)}",
    )
    assert (
        panel.locator("[data-whatif-shown]")
        .text_content()
        .startswith(f"All {cut.group(2)} changes shown")
    )
    assert not panel.locator("[data-whatif-more]").is_visible()
    panel.locator("[data-whatif-plot] canvas").first.wait_for()
    ui.shot(page, shots, "whatif_01_r_parallel_zero")

    # The example opens its trajectory.
    link = panel.locator("tr[data-kind=sign_flip] a").first
    href = link.get_attribute("href")
    assert re.fullmatch(rf"/runs/{run_id}/trajectories/\d+/\d+/\d+/", href)

    # A weight typed after the recompute: the figures are not its, so the clone
    # waits for a recompute of it.
    clone = panel.locator("[data-whatif-clone]")
    assert clone.is_enabled() and not panel.locator("[data-whatif-stale]").is_visible()
    panel.locator("[data-weight=r_parallel]").fill("0.5")
    assert clone.is_disabled() and panel.locator("[data-whatif-stale]").is_visible()
    panel.locator("[data-weight=r_parallel]").fill("0")  # back to what was computed
    assert clone.is_enabled() and not panel.locator("[data-whatif-stale]").is_visible()

    clone.click()
    # The clone form, filled with the new weight: reviewed, then launched.
    page.wait_for_url(re.compile(rf"/runs/{run_id}/clone/\?weights="))
    assert page.locator("[data-whatif-notice]").is_visible()
    row = page.locator(
        "[data-component-row]", has=page.locator("option[value=r_parallel]:checked")
    )
    assert float(row.locator("input[name$='.weight']").input_value()) == 0
    ui.shot(page, shots, "whatif_01b_clone_form")
    page.locator("[data-launch]").first.click()
    # The clone's page.
    page.wait_for_url(
        lambda url: (
            run_id not in url and re.search(r"/runs/[0-9a-f-]{36}/(#repair)?$", url)
        )
    )
    clone_id = page.url.split("#")[0].rstrip("/").rsplit("/", 1)[-1]
    config = live.script(
        "from dashboard.models import Run\n"
        f"r = Run.objects.get(pk={clone_id!r})\n"
        "print(json.dumps([str(r.parent_id), r.config['reward']['components']]))\n"
    )
    assert config[0] == run_id
    weights = {c["name"]: c["weight"] for c in config[1]}
    assert weights["r_parallel"] == 0 and weights["r_perf"] == 1.0
    ui.shot(page, shots, "whatif_02_clone")

    page.goto(live.url + href)
    page.wait_for_selector("h1")
    ui.shot(page, shots, "whatif_03_example_trajectory")
    json.dumps(config)  # the clone's config is plain JSON


def test_open_a_group_and_follow_its_task_across_steps(live, page, shots, ui):
    run_id = live.script(SEED)
    ui.login(page, live.url)
    page.goto(f"{live.url}/runs/{run_id}/trajectories/?step=3")
    page.locator("section[aria-label='group 1'] [data-task-link]").click()
    page.wait_for_url(re.compile(rf"/runs/{run_id}/tasks/task-1/$"))
    steps = page.locator("[data-task-history] tbody tr")
    assert [steps.nth(i).get_attribute("data-task-step") for i in range(6)] == [
        "6", "5", "4", "3", "2", "1",
    ]  # fmt: skip
    assert steps.nth(0).locator("[data-rollout-link]").count() == 4
    page.wait_for_selector("[data-chart=task][data-points='6'] canvas")
    ui.shot(page, shots, "task_01_history")

    # Each advantage opens its rollout, of that step's group.
    steps.nth(4).locator("[data-rollout-link]").nth(2).click()
    page.wait_for_url(re.compile(rf"/runs/{run_id}/trajectories/2/1/2/$"))
    assert page.locator("[data-task-link]").text_content() == "task-1"
