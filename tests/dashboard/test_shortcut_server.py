"""A shortcut learned more slowly than the detectors' window, on the server: an
external run whose episodes shrink from 7.8 to 3.5 tokens over 26 steps while success
stays flat and the proxy terms pay the reward raises ``shortcut`` against the run's
start, at the step the trainer's own
monitor raises it, though its steps arrive in batches (the start levels of the
later ones read back from the stored points)."""

from __future__ import annotations

import pytest
from test_external_runs import TokenClient, new_run

from dashboard.models import Alert
from dashboard.site import tokens
from rewards.config import DetectorConfig
from rewards.monitor import RewardMonitor

pytestmark = pytest.mark.django_db

LENGTHS = [7.8 + 0.15 * (-1) ** i for i in range(8)]
LENGTHS += [7.8 - 4.3 * k / 26 + 0.15 * (-1) ** k for k in range(1, 27)]
LENGTHS += [3.5 + 0.15 * (-1) ** i for i in range(10)]


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "test")[1])


def _events(first: int, last: int, success: float) -> list[dict]:
    return [
        {
            "type": "step",
            "step": i,
            "metrics": {
                "completions/mean_length": LENGTHS[i - 1],
                "success": success,
                "reward": 1.0,
                "proxy_reward": 0.98,  # the format term pays it all
            },
        }
        for i in range(first, last + 1)
    ]


def _monitor_steps(success: float) -> list[int]:
    monitor = RewardMonitor(DetectorConfig(), "calc")
    fired = []
    for i, n in enumerate(LENGTHS, start=1):
        summary = {"step": float(i), "length": n, "success": success}
        alerts = monitor.observe({**summary, "reward": 1.0, "proxy_reward": 0.98})
        fired += [i for a in alerts if a.detector == "shortcut"]
    return fired


def test_a_slow_shortcut_is_raised_on_the_server_where_the_trainer_raises_it(api):
    run_id = new_run(api)
    for first, last in ((1, 3), (4, 15), (16, len(LENGTHS))):
        assert api.post_events(run_id, _events(first, last, 0.1)).status_code == 200
    alerts = list(Alert.objects.filter(run_id=run_id, detector="shortcut"))
    expected = _monitor_steps(0.1)
    assert len(expected) == 1
    assert [a.step for a in alerts] == expected
    assert alerts[0].message.endswith("(from the run's start)")
    assert alerts[0].message.startswith("shortcut: episodes 7.8 -> ")


def test_the_same_fall_with_success_rising_is_not_one(api):
    run_id = new_run(api)
    events = _events(1, len(LENGTHS), 0.1)
    for i, e in enumerate(events):
        e["metrics"]["success"] = min(0.1 + 0.02 * i, 0.9)
    assert api.post_events(run_id, events).status_code == 200
    assert not Alert.objects.filter(run_id=run_id, detector="shortcut").exists()
