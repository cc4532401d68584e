"""No learning signal on the server (issue 22, item 9): an external run whose groups
all had identical rewards raises ``no_learning_signal`` as its steps arrive, and its page
warns; a healthy one does not."""

from __future__ import annotations

import pytest
from dashtest import client_for
from test_external_runs import TokenClient, new_run

from dashboard.models import Alert, Run, RunStatus
from dashboard.runs import services
from dashboard.site import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "test")[1])


def steps(fracs: list[float]) -> list[dict]:
    return [
        {
            "type": "step",
            "step": i,
            "metrics": {"reward": 0.25, "frac_reward_zero_std": frac},
        }
        for i, frac in enumerate(fracs, start=1)
    ]


def test_an_external_run_with_identical_rewards_in_every_group_is_warned(api, owner):
    run_id = new_run(api)
    assert api.post_events(run_id, steps([1.0] * 15)).status_code == 200
    assert api.post_events(run_id, steps([1.0] * 30)[15:]).status_code == 200
    alerts = list(Alert.objects.filter(run_id=run_id, detector="no_learning_signal"))
    # at 8 steps of no signal, and not again while it lasts (as the trainer's
    # monitor: it re-arms only after a whole window without the pattern)
    assert [a.step for a in alerts] == [8]
    assert (
        api.post_events(
            run_id, [{"type": "run_finished", "status": "succeeded"}]
        ).json()["accepted"]
        == 1
    )
    assert Run.objects.get(pk=run_id).status == RunStatus.SUCCEEDED
    page = client_for(owner).get(f"/runs/{run_id}/").content.decode()
    warning = page.split("data-no-signal>", 1)[1].split("</div>", 1)[0]
    assert "No learning signal:" in warning
    assert warning.lower().count("no learning signal") == 1  # said once, not twice
    assert "100% of groups had identical rewards over the last 8 steps" in warning
    assert "the run succeeded without learning from it" in warning


def test_a_healthy_external_run_is_not_warned(api, owner):
    run_id = new_run(api)
    # a fresh policy failing everything for a few steps, then groups that disagree
    fracs = [1.0] * 4 + [0.875, 1.0, 0.75, 0.875, 0.625] * 10
    assert api.post_events(run_id, steps(fracs)).status_code == 200
    assert not Alert.objects.filter(
        run_id=run_id, detector="no_learning_signal"
    ).exists()
    page = client_for(owner).get(f"/runs/{run_id}/").content.decode()
    assert "data-no-signal hidden" in page


def test_the_warning_is_hidden_on_a_run_without_the_alert(owner, tiny_config, enqueued):
    run = services.launch_run(owner, tiny_config)
    page = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    assert "data-no-signal hidden" in page


def test_a_signal_that_keeps_going_and_coming_back_alerts_as_the_trainer_does(api):
    # A converged policy: groups alike for stretches, with steps where a few differ
    # (the live swarm demo past step 500). The server's alerts, sent in batches of
    # 7 steps, are the trainer's monitor's: fewer as the pattern keeps returning.
    from rewards.config import DetectorConfig
    from rewards.monitor import RewardMonitor

    alike, differ = [1.0] * 12, [0.5]
    fracs = alike + differ * 25 + alike + differ * 25 + alike + differ * 45 + alike
    monitor = RewardMonitor(DetectorConfig(), "calc")
    expected = []
    for step, f in enumerate(fracs, start=1):
        alerts = monitor.observe({"step": float(step), "zero_std": f, "reward": 0.25})
        expected += [a.step for a in alerts]
    # Seen at steps 8-12, 45-49, 82-86 and 139-143: absent 32 steps after one alert
    # fires (a window, 20); after two, 32 are not enough (two windows), 52 are.
    # The old rule: 8, 45, 82, 139.
    assert expected == [8, 45, 139]
    run_id = new_run(api)
    events = steps(fracs)
    for i in range(0, len(events), 7):
        assert api.post_events(run_id, events[i : i + 7]).status_code == 200
    alerts = Alert.objects.filter(run_id=run_id, detector="no_learning_signal")
    assert sorted(a.step for a in alerts) == expected
