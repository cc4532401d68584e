"""``make run`` leaves something live to watch (issue 11, item 9): the demo bootstrap
launches a quick calc demo and a long swarm demo, once; the home page leads to the
run training now, or to the one about to start."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client

from dashboard.models import Run, RunStatus
from dashboard.runs.demos import DEMO_CONFIG, LIVE_DEMO_CONFIG
from trainer.config import TrainConfig

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _pages(settings, tmp_path):
    settings.VAR_DIR = tmp_path


def test_the_demo_bootstrap_launches_a_quick_demo_and_a_long_one_once(
    enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("bootstrap_demo", force=True)
    runs = list(Run.objects.order_by("created_at"))
    assert [r.name for r in runs] == [DEMO_CONFIG["name"], LIVE_DEMO_CONFIG["name"]]
    assert [r.config["steps"] for r in runs] == [200, 1500]
    assert len(enqueued) == 2
    with django_capture_on_commit_callbacks(execute=True):
        call_command("bootstrap_demo", force=True)  # a restart launches nothing again
    assert Run.objects.count() == 2 and len(enqueued) == 2


def test_the_live_demo_config_is_valid():
    cfg = TrainConfig.model_validate(LIVE_DEMO_CONFIG)
    assert cfg.env.name == "swarm" and cfg.steps == 1500
    # Paid for the task alone: with the default swarm reward's annealed r_parallel and
    # r_finish the tiny model learned those and its success fell to 0.
    names = [c.name for c in cfg.reward.components]
    assert names == ["r_perf", "format"]


def test_the_home_page_leads_to_the_run_training_now(enqueued):
    call_command("bootstrap_demo", force=True)
    quick, long = Run.objects.order_by("created_at")
    c = Client()
    c.force_login(quick.owner)
    html = c.get("/").content.decode()
    banner = html[html.index("data-live-banner") - 60 :][:400]
    assert f'href="/runs/{quick.pk}/"' in banner and "Starting soon" in banner

    Run.objects.filter(pk=quick.pk).update(status=RunStatus.SUCCEEDED)
    Run.objects.filter(pk=long.pk).update(status=RunStatus.RUNNING, last_step=42)
    html = c.get("/").content.decode()
    banner = html[html.index("data-live-banner") - 60 :][:600]
    assert f'href="/runs/{long.pk}/"' in banner
    assert "Training now: demo: swarm, live for a while" in banner
    assert "step 42 of 1500" in banner and "Watch it live" in banner
    # In its warm start: that, not "step 0 of 1500".
    Run.objects.filter(pk=long.pk).update(
        last_step=0, warmup={"done": 24, "of": 300, "loss": 1.0}
    )
    html = c.get("/").content.decode()
    assert "warm start 24 of 300 · " in html and "step 0 of" not in html

    Run.objects.filter(pk=long.pk).update(status=RunStatus.SUCCEEDED)
    assert "data-live-banner" not in c.get("/").content.decode()
    # An external run streaming in: no step total, no environment or preset known.
    Run.objects.create(
        owner=long.owner, name="walk: external curl", external=True,
        framework="custom", status=RunStatus.RUNNING, last_step=11, config={},
    )  # fmt: skip
    html = c.get("/").content.decode()
    where = html[html.index("data-live-where") :][:200]
    assert "Receiving now: walk: external curl" in html
    assert where.startswith("data-live-where>step 11 · custom (external)</span>")
