"""What-if with DAPO's overlong penalty added to a run that did not have it: the
panel offers it sized to the run's generation budget (turns x tokens per action), the
recomputation scores the stored rollouts with those parameters (not the component's
defaults, 512 tokens, which no rollout of a 6-token budget reaches), and the clone it
opens adds it with the same parameters. The panel's line that added components are
scored from the episodes' facts shows only where one can be added."""

from __future__ import annotations

import json

import pytest

from tests.dashboard.test_whatif_api import make_run, post

pytestmark = pytest.mark.django_db


def budget_run(owner, turns: int = 2, tokens: int = 3):
    """A swarm run whose rollouts generate at most ``turns x tokens`` tokens; its
    stored rollouts #i generated [1 + i, 2] tokens (test_whatif_api.make_run)."""
    from dashboard.models import Run

    run = make_run(owner, "grpo")
    cfg = json.loads(json.dumps(run.config))
    cfg["rollout"].update(max_turns=turns, max_action_tokens=tokens)
    Run.objects.filter(pk=run.pk).update(config=cfg)
    run.refresh_from_db()
    return run


def test_the_panel_offers_it_sized_to_the_runs_budget(owner, enqueued):
    from dashboard.reads.whatif import component_weights

    run = budget_run(owner)
    added = {c["key"]: c for c in component_weights(run) if c["added"]}
    assert added["overlong_penalty"]["sized"] == "max_len 6, cache 1"
    assert added["overlong_penalty"]["weight"] == 0.0
    own = [c["key"] for c in component_weights(run) if not c["added"]]
    assert "overlong_penalty" not in own


def test_its_raw_values_use_the_sized_parameters(owner, enqueued):
    from dashboard.reads.whatif_added import raw_values

    run = budget_run(owner)
    raw = raw_values(run, "swarm", ["overlong_penalty"], [1], budget=6)
    # Past max_len - cache = 5 only rollout #3 (4 + 2 = 6 tokens: -1 at the budget);
    # these rows store no agent steps, so it lands on the episode's one pseudo-step.
    by_index = {k[2]: v["overlong_penalty"] for k, v in raw.items()}
    assert by_index == {0: [0.0], 1: [0.0], 2: [0.0], 3: [-1.0]}
    # The component's defaults (512 tokens) would charge nothing at all.
    unsized = raw_values(run, "swarm", ["overlong_penalty"], [1])
    assert all(v["overlong_penalty"] == [0.0] for v in unsized.values())


def test_the_recomputation_charges_the_long_rollouts(owner, owner_client, enqueued):
    run = budget_run(owner)
    r = post(owner_client, run, {"weights": {"overlong_penalty": 2.0}, "examples": 100})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["weights"]["added"] == ["overlong_penalty"]
    # #3 of each of 3 groups at 4 steps ran into the budget: the page says so.
    assert body["added_scored"] == {"overlong_penalty": 12} and body["rollouts"] == 48
    changed = [
        ex for kind in body["examples"].values() for ex in kind if ex["index"] != 3
    ]
    # Only rollout #3 of each group lost 2 (weight x -1); the group's other members
    # change only through the group's mean, never their own totals.
    for kind in body["examples"].values():
        for ex in kind:
            drop = ex["old_total"] - ex["new_total"]
            assert drop == pytest.approx(2.0 if ex["index"] == 3 else 0.0), ex
    assert body["total"]["sign_flips"] > 0 or changed
    comps = body["clone_overrides"]["reward"]["components"]
    added = [c for c in comps if c["name"] == "overlong_penalty"]
    assert added == [
        {
            "name": "overlong_penalty",
            "weight": 2.0,
            "params": {"max_len": 6, "cache": 1},
        }
    ]


def test_the_clone_form_adds_it_with_those_parameters(owner, enqueued):
    from dashboard.runs.repair import reweighted_config

    run = budget_run(owner, turns=4, tokens=10)
    config, checked = reweighted_config(run, {"overlong_penalty": 1.0})
    assert checked == {"overlong_penalty": 1.0}
    comp = [
        c for c in config["reward"]["components"] if c["name"] == "overlong_penalty"
    ]
    assert comp[0]["params"] == {"max_len": 40, "cache": 8}


def test_without_a_budget_it_is_not_offered():
    from rewards.repair import addable

    assert "overlong_penalty" not in addable("calc", ["outcome", "format"])
    assert "overlong_penalty" in addable("calc", ["outcome", "format"], 30)
    assert "overlong_penalty" not in addable("calc", ["overlong_penalty"], 30)


def test_the_facts_line_shows_only_where_a_component_can_be_added(owner, owner_client):
    from dashboard.runs import services

    scored = "scored from the stored episodes' facts"
    run = make_run(owner, "grpo")
    html = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert scored in html and "data-sized" in html
    # Every generic component already in: nothing to add, nothing said about it.
    full = services.launch_run(
        owner,
        {
            "name": "full",
            "env": {"name": "calc"},
            "model": {"size": "tiny", "device": "cpu"},
            "reward": {
                "components": [
                    {"name": n, "weight": 0.1}
                    for n in ("outcome", "format", "overlong_penalty")
                ]
            },
        },
    )
    html = owner_client.get(f"/runs/{full.pk}/").content.decode()
    assert 'id="whatif"' in html
    assert scored not in html and "data-added" not in html


def test_the_budget_is_what_an_episode_can_write():
    """A dataset episode ends at the environment's own max_turns (4) before the
    rollout's (6): sized to 6 turns the penalty could never fire. The whole budget
    bounds it where it is smaller, and the panel says that it counts the prompt."""
    from dashboard.reads.whatif import sized_text
    from rewards.repair_additions import sized_params
    from trainer.config import TrainConfig
    from trainer.runner import generation_budget, turn_limit

    def cfg(env_turns, turns, tokens, total=512):
        return TrainConfig.model_validate(
            {
                "env": {"name": "dataset", "params": {"path": "x.jsonl",
                                                      "max_turns": env_turns}},
                "rollout": {"max_turns": turns, "max_action_tokens": tokens,
                            "max_total_tokens": total},
            }
        )  # fmt: skip

    c = cfg(4, 6, 12)
    assert (turn_limit(c), generation_budget(c)) == (4, 48)
    assert sized_text(sized_params("overlong_penalty", 48), c.rollout) == (
        "max_len 48, cache 9"
    )
    c = cfg(8, 6, 128, total=256)
    assert (turn_limit(c), generation_budget(c)) == (6, 256)
    text = sized_text(sized_params("overlong_penalty", 256), c.rollout)
    assert text.startswith("max_len 256, cache 51; max_total_tokens bounds it")
