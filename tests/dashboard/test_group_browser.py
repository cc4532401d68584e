"""Group browser: zero-variance groups flagged, first divergent turn, sort."""

from __future__ import annotations

import pytest

from dashboard.pages.groups import first_divergence

pytestmark = pytest.mark.django_db


def test_first_divergence_is_the_first_turn_whose_actions_differ():
    assert first_divergence([["a", "b", "c"], ["a", "x", "c"]]) == 1
    assert first_divergence([["a", "b"], ["a", "b", "c"]]) == 2  # one went on
    assert first_divergence([["a"], ["a"]]) is None


def test_the_step_page_flags_zero_variance_and_sorts_by_reward(
    owner, owner_client, enqueued
):
    from dashboard.ingest import writer
    from dashboard.runs import services

    run = services.launch_run(owner, {"name": "g", "rollout": {"group_size": 2}})
    batch = writer.Batch()
    for group, rewards in ((0, (0.5, 0.5)), (1, (0.1, 0.9))):
        for index, r in enumerate(rewards):
            batch.add(
                run.id,
                {
                    "type": "trajectory",
                    "step": 1,
                    "group": group,
                    "index": index,
                    "reward": r,
                    "advantage": 0.0,
                    "steps": [{"action": "search"}, {"action": f"answer {index}"}],
                },
            )
    writer.write(run.id, batch)
    page = owner_client.get(f"/runs/{run.pk}/trajectories/?step=1&sort=reward")
    html = page.content.decode()
    assert html.count("data-zero-variance") == 1
    assert html.count("diverge at turn 1") == 2
    g1 = html[html.index('aria-label="group 1"') :]
    assert g1.index("/trajectories/1/1/1/") < g1.index("/trajectories/1/1/0/")
