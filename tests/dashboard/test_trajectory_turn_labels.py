"""A trajectory's page names the agent's turns as turns (a walk read "Step 20 · group
0 · rollout 1" over blocks labelled "Step 0", "Step 1", "Step 2": a training step and
the agent's turns under one word). The heading's training step stays a step; each
block, its reward, the attribution's sums and a judge's target are turns, as the
page's "3 turns" says and the token view's turn blocks do."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.fixture
def swarm(owner):
    return seed_run(owner, name="swarm-turns", env="swarm", steps=3, alert_every=0)


def test_the_agents_turns_are_turns_and_the_training_step_a_step(owner, swarm):
    c = Client()
    c.force_login(owner)
    r = c.get(f"/runs/{swarm.pk}/trajectories/2/0/1/")
    html = r.content.decode()
    n = len(r.context["view"].steps)
    assert n >= 2
    # The heading: the training step.
    assert re.search(r"<h1>Step 2 · group 0 · rollout 1</h1>", html)
    labels = re.findall(r"<strong data-turn-label>([^<]*)</strong>", html)
    assert labels == [f"Turn {i}" for i in range(n)]
    blocks = html.split("data-agent-step=")[1:]
    assert len(blocks) == n
    for i, block in enumerate(blocks):
        head = _text(block.split('class="step-body"')[0])
        assert f"Turn {i}" in head and "turn reward" in head, head
        assert "Step" not in head and "step reward" not in head, head
        assert f'aria-label="rewards at turn {i}"' in block
    assert 'id="turn-0"' in html and 'aria-label="turn 0"' in html
    # The attribution sums over turns.
    attribution = _text(html.split("data-attribution>")[1].split("</section>")[0])
    assert "Σ turns" in attribution and "Σ steps" not in attribution
    assert "Per-turn rewards sum to each component" in attribution
    assert "per-step" not in attribution.lower()
    # A judge of one turn names it as a turn.
    judged = re.findall(r"data-judged-turn>([^<]*)<", html)
    assert judged and all(re.fullmatch(r"on turn \d+", j) for j in judged), judged
    # No "Step N" label for a turn anywhere on the page: "Step" is the heading's.
    assert re.findall(r"\bStep \d+", _text(html.split("</h1>")[1])) == []
