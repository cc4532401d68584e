"""The reward-hacking suite replayed through the events API (issue 25): each recorded
slice (``tests/fixtures/hacking``), sent as an external run's events a few steps a
batch, makes the server's detectors raise the alerts the trainer's monitor raises over
the same numbers: the same detectors at the same steps, naming the same rollouts."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_external_runs import TokenClient

from bench.hacking_measure import replay
from bench.hacking_server import batches
from bench.hacking_slices import read_slice
from dashboard.models import Alert
from dashboard.site import tokens

pytestmark = pytest.mark.django_db

SLICES = Path(__file__).resolve().parents[1] / "fixtures" / "hacking"
NAMES = sorted(p.name.removesuffix(".jsonl.gz") for p in SLICES.glob("*.jsonl.gz"))


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "test")[1])


def server_alerts(api, meta, steps):
    body = {
        "name": f"replay {meta['run']}",
        "framework": "replay",
        "config": {
            "env": {"name": meta["env"]},
            "reward": {"detectors": meta["detectors"]},
        },
    }
    r = api.post_json("/api/runs/external", body)
    assert r.status_code == 201, r.content
    run_id = r.json()["id"]
    for events in batches(steps):
        assert api.post_events(run_id, events).status_code == 200
    return [
        (a.step, a.detector, [(t["group"], t["index"]) for t in a.trajectories])
        for a in Alert.objects.filter(run_id=run_id).order_by("step", "detector")
    ]


@pytest.mark.parametrize("name", NAMES)
def test_the_server_raises_the_trainers_alerts(api, name):
    meta, steps = read_slice(SLICES / f"{name}.jsonl.gz")
    ours = sorted(
        (a.step, a.detector, [(t.group, t.index) for t in a.trajectories])
        for a in replay(meta, steps)
    )
    assert server_alerts(api, meta, steps) == ours
    if not name.endswith("-twin"):
        assert ours  # a hacked slice has alerts to agree on
