"""A TRL run's page reads well (issue 22.10, 22.11): TRL's ``loss`` stays the total
loss, its end-of-training summaries are a table (not one-point series), and every
chart explains itself (a line of help, axis titles, what each key means)."""

from __future__ import annotations

import pytest

from tests.fixtures.seed import write_events
from trainer.metric_names import map_metrics

pytestmark = pytest.mark.django_db

SUMMARY = {
    "train_runtime": 812.5,
    "train_samples_per_second": 3.9,
    "train_steps_per_second": 0.12,
    "train_loss": 0.0123,
}


@pytest.fixture
def trl_run(owner):
    from dashboard.runs import external

    run = external.do_create_external_run(owner, name="trl", framework="trl")

    def events():
        for s in range(1, 11):
            m = {"loss": 0.01 * s, "grad_norm": 40.0 + s, "reward": 0.1 * s}
            m["frac_reward_zero_std"] = 0.5
            if s == 10:
                m.update(SUMMARY)
            yield {"type": "step", "step": s, "metrics": m}

    run.last_step = write_events(run, events())
    run.save()
    return run


def test_trl_loss_is_kept_as_the_total_loss_not_the_policy_loss():
    out = map_metrics("trl", {"train/loss": 0.5, "train/grad_norm": 2.0})
    assert out["loss"] == 0.5 and "policy_loss" not in out
    assert map_metrics("wandb", {"train/loss": 0.5}).get("policy_loss") is None


def test_end_of_training_summaries_are_a_table_not_series(owner_client, trl_run):
    r = owner_client.get(f"/runs/{trl_run.pk}/")
    charted = {k for c in r.context["page_data"]["charts"] for k in c["keys"]}
    assert not charted & set(SUMMARY), charted
    assert "loss" in charted and "grad_norm" in charted
    html = r.content.decode()
    table = html[html.index("data-train-summary") :]
    for key in SUMMARY:
        assert f'data-summary-key="{key}"' in table
    assert "812.5" in table and "training time (s)" in table


def test_every_chart_has_help_axis_titles_and_key_meanings(owner_client, trl_run):
    r = owner_client.get(f"/runs/{trl_run.pk}/")
    charts = r.context["page_data"]["charts"]
    by_id = {c["id"]: c for c in charts}
    for c in charts:
        assert c["help"] and c["x_title"] == "training step" and c["y_title"], c
    dropped = by_id["dropped"]
    assert "no learning signal" in dropped["key_help"]["frac_reward_zero_std"]
    assert "KL" in by_id["loss"]["key_help"]["loss"]  # the total, KL term included
    html = r.content.decode()
    assert (
        'id="chart-dropped-help"' in html
        and 'aria-describedby="chart-dropped-help"' in html
    )


def test_the_reward_chart_says_when_its_weights_move_with_the_step(owner, owner_client):
    """A swarm run's default reward anneals r_parallel and r_finish to 0 over 100
    steps (PARL): its total falls while the policy gets no worse, which a walk took
    for a broken demo. The Reward chart says so; a run of constant weights does not."""
    from dashboard.models import Run

    def reward_help(config):
        run = Run.objects.create(owner=owner, name="r", config=config)
        charts = owner_client.get(f"/runs/{run.pk}/").context["page_data"]["charts"]
        return next(c for c in charts if c["id"] == "reward")["help"]

    assert "r_parallel 0.3 → 0 and r_finish 0.3 → 0 by step 100" in reward_help(
        {"env": {"name": "swarm"}}
    )
    assert "weights move" not in reward_help({"env": {"name": "calc"}})
    own = {
        "env": {"name": "calc"},
        "reward": {
            "components": [
                {"name": "outcome", "weight": 1.0},
                {
                    "name": "format",
                    "weight": 0.5,
                    "schedule": {"kind": "linear", "end": 0.1, "steps": 40},
                },
            ]
        },
    }
    assert "(format 0.5 → 0.1 by step 40)" in reward_help(own)
