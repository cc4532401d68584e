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


def _text_rollouts(run, completions_by_group):
    """TRL's shape: prompt and completion text, no agent steps."""
    from dashboard.ingest import writer
    from trainer.importers.shapes import text_trajectory

    batch = writer.Batch()
    for group, completions in completions_by_group.items():
        for index, text in enumerate(completions):
            batch.add(
                run.id,
                text_trajectory(
                    step=1,
                    group=group,
                    index=index,
                    prompt=f"question {group}",
                    completion=text,
                    reward=float(index),
                    components={"acc": float(index)},
                    advantage=0.0,
                ),
            )
    writer.write(run.id, batch)


def test_text_only_groups_compare_their_completions_not_missing_actions(
    owner, owner_client
):
    from dashboard.runs import external

    run = external.do_create_external_run(owner, name="trl", framework="trl")
    _text_rollouts(run, {0: ["4", "5", "4"], 1: ["same", "same"]})
    html = owner_client.get(f"/runs/{run.pk}/trajectories/?step=1").content.decode()
    g0 = html[html.index('aria-label="group 0"') : html.index('aria-label="group 1"')]
    g1 = html[html.index('aria-label="group 1"') :]
    assert "2 distinct completions of 3" in g0 and "identical" not in g0
    assert "identical completions" in g1 and "data-identical" in g1
