"""An external run's config is whatever its trainer sent (TRL's arguments, a trackio
run's dict): every page reads it without assuming this trainer's schema. Each shape
here was a 500 on some page (a tester's finding), realistic ones first."""

from __future__ import annotations

import pytest
from fake_runner import events_for_step
from test_external_runs import TokenClient

from dashboard.models import Run
from dashboard.site import tokens
from tests.dashboard.dashtest import client_for
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db

SHAPES = [
    {"env": "gsm8k"},  # a realistic key: the dataset's name
    {"env": {"name": "gsm8k"}},  # an environment this server has never heard of
    {"env": {"name": {"a": 1}}, "reward": {"components": {"a": 1}}},
    {"eval": {"every": "epoch"}},
    {"algorithm": {"kl_beta": 10**400}, "learning_rate": 10**400},
    {"reward": {"components": 3}},
    {"reward": "outcome", "algorithm": "grpo", "model": 7, "steps": "many"},
    {"rollout": {"group_size": [8]}, "optim": {"lr": {"value": 1e-6}}},
]


@pytest.fixture
def api(owner):
    return TokenClient(tokens.do_create_token(owner, "test")[1])


def _external(api, config) -> str:
    r = api.post_json(
        "/api/runs/external", {"name": "ext", "framework": "trl", "config": config}
    )
    assert r.status_code == 201, r.content
    run_id = r.json()["id"]
    r = api.post_events(run_id, events_for_step(3, 1))
    assert r.status_code == 200, r.content
    return run_id


@pytest.mark.parametrize("config", SHAPES, ids=[str(s)[:40] for s in SHAPES])
def test_every_page_of_an_external_run_reads_any_config(api, owner, config):
    run_id = _external(api, config)
    native = seed_run(owner, name="native", env="calc", steps=2)
    client = client_for(owner)
    for url in (
        f"/runs/{run_id}/",
        f"/runs/{run_id}/trajectories/",
        f"/runs/{run_id}/trajectories/1/0/0/",
        f"/runs/{run_id}/critical-path/",
        f"/compare/?runs={run_id},{native.pk}",
        f"/compare/?runs={native.pk},{run_id}",
        f"/api/runs/{run_id}",
        f"/api/runs/{run_id}/metrics",
        "/",
        "/runs/",
    ):
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code)


def test_an_external_run_is_not_cloned_by_the_form(api, owner):
    run_id = _external(api, {"env": "gsm8k"})
    client = client_for(owner)
    r = client.get(f"/runs/{run_id}/clone/")
    assert r.status_code == 400
    assert "run: an external run is trained elsewhere" in r.content.decode()
    for url in (f"/runs/{run_id}/clone/", f"/runs/{run_id}/clone/check/"):
        r = client.post(url, {"steps": "3"})
        assert r.status_code == 400, url
    # The API too: it once launched a run of the default config from one.
    r = api.post_json(f"/api/runs/{run_id}/clone", {})
    assert r.status_code == 400, r.content
    assert r.json()["detail"].startswith("run: an external run is trained elsewhere")
    assert Run.objects.filter(external=False).count() == 0


def test_a_rollout_sent_with_totals_alone_is_not_flagged_as_inconsistent(api, owner):
    r = api.post_json(
        "/api/runs/external", {"name": "ext", "framework": "trl", "config": {}}
    )
    run_id = r.json()["id"]
    event = {"type": "trajectory", "step": 1, "group": 0, "index": 0, "reward": 0.5,
             "rewards": {"total": 0.5, "components": {"correct": 0.5}}}  # fmt: skip
    assert api.post_events(run_id, [event]).status_code == 200
    html = client_for(owner).get(f"/runs/{run_id}/trajectories/1/0/0/").content.decode()
    table = html[html.index("data-attribution") :][:2500]
    assert "check-bad" not in table and "do not add up" not in table
    assert "no per-turn rewards were recorded" in table


def test_a_component_name_may_wrap_at_its_underscores_and_stays_escaped(api, owner):
    r = api.post_json(
        "/api/runs/external", {"name": "ext", "framework": "trl", "config": {}}
    )
    run_id = r.json()["id"]
    name = "single_search_<b>x</b>"
    event = {"type": "trajectory", "step": 1, "group": 0, "index": 0, "reward": 0.5,
             "rewards": {"total": 0.5, "components": {name: 0.5}}}  # fmt: skip
    assert api.post_events(run_id, [event]).status_code == 200
    html = client_for(owner).get(f"/runs/{run_id}/trajectories/1/0/0/").content.decode()
    assert "<td>single_<wbr>search_<wbr>&lt;b&gt;x&lt;/b&gt;</td>" in html
    assert "<b>x</b>" not in html
