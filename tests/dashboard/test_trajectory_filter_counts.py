"""The trajectories page counts what its filters hid, whole groups included: on a
swarm run with 2 groups of 4, ``?reward_min=0.2`` said "2 rollouts in 1 group, 2
hidden by the filters" when 6 of 8 were hidden (a group none of whose rollouts
passed was left out of the count). And a numeric filter of a link that is no number
says so naming the parameter, as ``?step=abc`` does, never a 500."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from dashtest import client_for

from dashboard.models import Trajectory
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(owner):
    run = seed_run(owner, name="swarm", env="swarm", steps=6, alert_every=50)
    rewards = {0: [0.1, 0.1, 0.5, 0.5], 1: [0.0, 0.0, 0.1, 0.15]}
    for t in Trajectory.objects.filter(run=run, step=6):
        t.reward = rewards[t.group][t.index]
        t.save(update_fields=["reward"])
    return run


def count_line(html: str) -> str:
    line = html.split("data-shown-count>")[1].split("<kbd>")[0]
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", line)).split())


def test_a_group_the_filters_hide_entirely_counts_among_the_hidden(owner, run):
    c = client_for(owner)
    html = c.get(f"/runs/{run.pk}/trajectories/?reward_min=0.2").content.decode()
    assert count_line(html) == (
        "2 rollouts in 1 group, 6 hidden by the filters (1 group entirely)."
    )
    assert html.count('class="rollout"') == 2
    html = c.get(f"/runs/{run.pk}/trajectories/?step=6").content.decode()
    assert count_line(html) == "8 rollouts in 2 groups."
    html = c.get(f"/runs/{run.pk}/trajectories/?reward_min=0.12").content.decode()
    assert count_line(html) == "3 rollouts in 2 groups, 5 hidden by the filters."
    html = c.get(f"/runs/{run.pk}/trajectories/?reward_min=9").content.decode()
    assert count_line(html) == (
        "0 rollouts in 0 groups, 8 hidden by the filters (2 groups entirely)."
    )
