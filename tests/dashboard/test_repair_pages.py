"""The repair loop on the run page: an alert shows its evidence and the fix that
removes its incentive (escaped), the what-if offers the component the run lacks, and
a repair clone's page carries the comparison panel."""

from __future__ import annotations

import pytest

from dashboard.models import Alert, Run
from tests.dashboard.dashtest import client_for
from tests.fixtures.hacked import seed_spurious

pytestmark = pytest.mark.django_db


@pytest.fixture
def hacked(owner):
    return seed_spurious(owner, steps=16, onset=6)


def test_an_alert_shows_its_evidence_and_fix(hacked, owner):
    alert = hacked.alert_set.get(detector="spurious_parallelism")
    html = client_for(owner).get(f"/runs/{hacked.pk}/").content.decode()
    assert f'id="alert-spurious_parallelism-{alert.step}"' in html
    assert (
        "data-evidence-table" in html
        and '<code class="muted">finish_rate_late</code>' in html
    )
    assert "subtasks finished, late half" in html
    assert "Remove the incentive:</strong> set <code>r_finish</code>" in html
    assert f'href="?repair=spurious_parallelism&amp;step={alert.step}#whatif"' in html
    # The what-if offers r_finish (a swarm component this run lacks) at 0.
    assert 'data-weight="r_finish" data-original="0" data-added' in html
    assert '"spurious_parallelism": {"detector": "spurious_parallelism"' in html
    assert 'id="repair"' not in html  # no repair panel on a run that repairs nothing


def test_evidence_from_a_run_is_escaped(hacked, owner):
    Alert.objects.filter(run=hacked).update(
        evidence={"<img src=x onerror=alert(1)>": "<script>alert(2)</script>"}
    )
    html = client_for(owner).get(f"/runs/{hacked.pk}/").content.decode()
    assert "<img src=x" not in html and "<script>alert(2)" not in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html


def test_a_detector_without_a_fix_says_so(hacked, owner):
    Alert.objects.create(run=hacked, step=3, detector="entropy_collapse",
                         message="entropy collapse", evidence={})  # fmt: skip
    html = client_for(owner).get(f"/runs/{hacked.pk}/").content.decode()
    assert "data-repair-none" in html and "raise the temperature" in html


def test_a_repair_clones_page_carries_the_comparison(hacked, owner, enqueued):
    from dashboard.runs.repair import do_launch_repair

    clone = do_launch_repair(
        owner, hacked, {"r_finish": 1.0}, detector="spurious_parallelism"
    )
    html = client_for(owner).get(f"/runs/{clone.pk}/").content.decode()
    assert (
        'id="repair"' in html
        and f'data-repair-url="/api/runs/{clone.pk}/repair"' in html
    )
    assert "js/repair.js" in html
    assert "<code>r_finish</code> = <strong>1.0</strong>" in html
    assert f'href="/runs/{hacked.pk}/#alert-spurious_parallelism-' in html
    # The parent lists it among its clones.
    parent = client_for(owner).get(f"/runs/{hacked.pk}/").content.decode()
    assert f'href="/runs/{clone.pk}/"' in parent
    assert Run.objects.get(pk=clone.pk).repair["detector"] == "spurious_parallelism"


def test_the_whatif_offers_no_added_line_when_nothing_can_be_added(owner):
    from tests.fixtures.seed import seed_run, valid_config

    config = valid_config("calc", "grpo", 4)
    config["reward"]["components"].append(
        {
            "name": "overlong_penalty",
            "weight": 0.5,
            "params": {"max_len": 30, "cache": 6},
        }
    )
    names = {c["name"] for c in config["reward"]["components"]}
    # every component calc can add (the overlong penalty sized to its budget)
    assert names >= {"outcome", "format", "overlong_penalty"}
    run = seed_run(owner, env="calc", steps=4, config=config)
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert 'data-weight="outcome"' in html and "data-whatif-addable" not in html
    assert "Not in this run" not in html


def test_an_external_runs_alert_does_not_send_its_owner_to_a_clone(owner):
    run = Run.objects.create(
        owner=owner, name="trl", external=True, framework="trl", status="running",
        config={"learning_rate": 1e-6},
    )  # fmt: skip
    Alert.objects.create(run=run, step=3, detector="length_drift",
                         message="lengths drift", evidence={})  # fmt: skip
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "data-repair-none" in html and "an overlong penalty" in html
    assert "Clone and edit" not in html


def test_a_swarm_run_paid_for_the_task_alone_shows_its_alerts(owner):
    """The live demo (r_perf and format, no r_parallel): its page answered 500 once
    an alert had fired (the spurious-parallelism fix matches r_parallel's weight)."""
    from dashboard.runs.demos import LIVE_DEMO_CONFIG

    run = Run.objects.create(
        owner=owner, name="swarm", config=LIVE_DEMO_CONFIG, status="running"
    )
    Alert.objects.create(run=run, step=4, detector="serial_collapse",
                         message="serial collapse", evidence={})  # fmt: skip
    response = client_for(owner).get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    assert "serial collapse" in response.content.decode()
