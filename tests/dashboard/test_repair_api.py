"""The repair loop over the API: an alert suggests the weight that removes its
incentive; ``POST /api/runs/{id}/repairs`` launches a clone with it (the owner only,
bad weights a 400 naming the field); ``GET /api/runs/{clone}/repair`` compares the
hack's statistics in parent and clone against the detector's thresholds."""

from __future__ import annotations

import json

import pytest

from dashboard.models import Run
from rewards.config import DetectorConfig
from tests.dashboard.dashtest import client_for
from tests.fixtures.hacked import play_clone, seed_spurious

pytestmark = pytest.mark.django_db


@pytest.fixture
def hacked(owner):
    return seed_spurious(owner, steps=20, onset=8)


def post(client, run, body):
    return client.post(
        f"/api/runs/{run.pk}/repairs",
        data=json.dumps(body),
        content_type="application/json",
    )


def components(run):
    return {c["name"]: c["weight"] for c in run.config["reward"]["components"]}


def test_the_alert_suggests_r_finish_at_r_parallels_weight(hacked, owner_client):
    body = owner_client.get(f"/api/runs/{hacked.pk}/alerts").json()
    # The hack is also paid proxy reward without success (reward_without_success).
    alerts = {a["detector"]: a for a in body["alerts"]}
    assert "spurious_parallelism" in alerts
    assert alerts["spurious_parallelism"]["trajectories"]  # its evidence
    s = body["suggestions"]["spurious_parallelism"]
    assert (s["component"], s["weight"], s["current"], s["added"]) == (
        "r_finish",
        1.0,
        None,
        True,
    )


def test_the_owner_launches_a_clone_with_the_weights(hacked, owner_client, enqueued):
    alert_step = hacked.alert_set.get(detector="spurious_parallelism").step
    r = post(owner_client, hacked, {"weights": {"r_finish": 1.0},
                                    "detector": "spurious_parallelism"})  # fmt: skip
    assert r.status_code == 201, r.content
    clone = Run.objects.get(pk=r.json()["id"])
    assert clone.parent_id == hacked.pk and r.json()["parent"] == str(hacked.pk)
    assert clone.repair == {
        "detector": "spurious_parallelism",
        "alert_step": alert_step,
        "weights": {"r_finish": 1.0},
    }
    assert components(clone) == {**components(hacked), "r_finish": 1.0}
    # Everything else is the parent's config.
    for key in ("env", "algorithm", "rollout", "model", "steps"):
        assert clone.config[key] == hacked.config[key]
    assert clone.status == "queued"
    assert "repair: spurious parallelism" in clone.name


def test_an_existing_weight_changes_in_place(hacked, owner_client, enqueued):
    r = post(owner_client, hacked, {"weights": {"r_parallel": 0.25}})
    assert r.status_code == 201, r.content
    clone = Run.objects.get(pk=r.json()["id"])
    assert components(clone) == {**components(hacked), "r_parallel": 0.25}
    assert clone.repair == {"weights": {"r_parallel": 0.25}}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"weights": {"r_finish": "lots"}}, "weights.r_finish: must be a number"),
        ({"weights": {"r_finish": 1e9}}, "weights.r_finish: must be a number"),
        ({"weights": {"r_finish": True}}, "weights.r_finish: must be a number"),
        ({"weights": {"fbeta": 1.0}}, "weights.fbeta: unknown component"),
        ({"weights": {}}, "weights: name at least one component"),
        ({"weights": [1, 2]}, "weights: name at least one component"),
        ({"weights": {"r_finish": 1}, "detector": "nope"}, "detector: must be one of"),
        (
            {"weights": {"r_finish": 1}, "detector": "serial_collapse"},
            "detector: this run has no serial_collapse alert",
        ),
        (
            {"weights": {"r_finish": 1}, "detector": "spurious_parallelism",
             "alert_step": 3},
            "alert_step: this run has no spurious_parallelism alert at step 3",
        ),
        (
            {"weights": {"r_finish": 1}, "detector": "spurious_parallelism",
             "alert_step": "x"},
            "alert_step: must be a step number",
        ),
        ({"weights": {"r_finish": 1}, "extra": 1}, "extra:"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(
    hacked, owner_client, enqueued, body, field
):
    r = post(owner_client, hacked, body)
    assert r.status_code == 400, r.content
    assert any(e.startswith(field) for e in r.json()["errors"]), r.json()
    assert Run.objects.count() == 1 and enqueued == []


def test_only_the_owner_may_launch_one(hacked, other, staff, enqueued):
    body = {"weights": {"r_finish": 1.0}}
    assert post(client_for(other), hacked, body).status_code == 404
    r = post(client_for(staff), hacked, body)  # staff may read it, not clone it
    assert r.status_code == 403 and r.json()["errors"][0].startswith("run: only")
    assert post(client_for(None), hacked, body).status_code == 401
    assert Run.objects.count() == 1 and enqueued == []


def test_an_external_run_is_refused(hacked, owner_client, enqueued):
    Run.objects.filter(pk=hacked.pk).update(external=True)
    r = post(owner_client, hacked, {"weights": {"r_finish": 1.0}})
    assert r.status_code == 400 and r.json()["errors"][0].startswith("run: ")


def test_the_clone_compares_the_hacks_statistics_with_its_parent(
    hacked, owner_client, enqueued
):
    r = post(owner_client, hacked, {"weights": {"r_finish": 1.0},
                                    "detector": "spurious_parallelism"})  # fmt: skip
    clone = Run.objects.get(pk=r.json()["id"])
    waiting = owner_client.get(f"/api/runs/{clone.pk}/repair").json()
    assert waiting["verdict"]["state"] == "waiting"
    play_clone(clone, steps=20)
    data = owner_client.get(f"/api/runs/{clone.pk}/repair").json()
    fin, par = data["stats"]
    assert (fin["metric"], fin["threshold"], fin["side"]) == (
        "finish_rate/mean",
        DetectorConfig().threshold("spurious_parallelism.max_finish_rate"),
        "below",
    )
    assert (par["metric"], par["threshold"], par["side"]) == (
        "parallelism/mean",
        2.0,
        "above",
    )
    assert len(fin["parent"]["step"]) == 20 and len(fin["clone"]["step"]) == 20
    # The parent sat in the hack's zone from its onset; the clone never did.
    assert data["zone"]["parent"]["steps"] >= 5 and data["zone"]["parent"]["first"] >= 8
    assert fin["parent"]["late_hacked"] and not fin["clone"]["late_hacked"]
    assert [a["step"] for a in data["alerts"]["parent"]] == [
        hacked.alert_set.get(detector="spurious_parallelism").step
    ]
    assert data["alerts"]["clone"] == []
    assert data["verdict"]["state"] == "held", data["verdict"]
    assert "never fired" in data["verdict"]["text"]
    # r_finish really paid in the clone (its own reward function).
    assert clone.metricpoint_set.filter(key="rewards/r_finish/mean").exists()


def test_a_run_that_is_no_repair_has_no_comparison(hacked, owner_client, other):
    r = owner_client.get(f"/api/runs/{hacked.pk}/repair")
    assert r.status_code == 404 and "not a repair clone" in r.json()["detail"]
    assert client_for(other).get(f"/api/runs/{hacked.pk}/repair").status_code == 404


def test_the_whatif_adds_r_finish_from_the_stored_episodes(hacked, owner_client):
    r = owner_client.post(
        f"/api/runs/{hacked.pk}/whatif",
        data=json.dumps({"weights": {"r_finish": 1.0}}),
        content_type="application/json",
    )
    assert r.status_code == 200, r.content
    report = r.json()
    assert report["weights"]["added"] == ["r_finish"]
    # Paying for finished subtasks changes which rollout is best in many groups.
    assert report["total"]["best_changes"] > 0 and report["total"]["sign_flips"] > 0
    comps = report["clone_overrides"]["reward"]["components"]
    assert {"name": "r_finish", "weight": 1.0} in comps
    bad = owner_client.post(
        f"/api/runs/{hacked.pk}/whatif",
        data=json.dumps({"weights": {"trajectory_recall": 1.0}}),
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert bad.json()["errors"][0].startswith("weights.trajectory_recall: unknown")


def _serial_clone(parent, evidence):
    """A serial-collapse repair clone of ``parent`` whose alert (step 5) carries
    ``evidence``: the parent 60% serial at 0.3 sub-agents a stage (it mostly spawns
    none), the clone 20% serial at 2 a stage."""
    from dashboard.models import Alert, MetricPoint

    Alert.objects.create(run=parent, step=5, detector="serial_collapse",
                         message="serial collapse", evidence=evidence)  # fmt: skip
    # An earlier alert (re-armed since) on the other statistic: not the one repaired.
    other = (
        {"parallelism_late": 1.0} if "serial_late" in evidence else {"serial_late": 0.6}
    )
    Alert.objects.create(run=parent, step=2, detector="serial_collapse",
                         message="serial collapse", evidence=other)  # fmt: skip
    clone = Run.objects.create(
        owner=parent.owner, name="repair", config=parent.config, parent=parent,
        repair={"detector": "serial_collapse", "alert_step": 5,
                "weights": {"r_parallel": 2.0}},
    )  # fmt: skip
    MetricPoint.objects.filter(
        run=parent, key__in=["serial/mean", "parallelism/mean"]
    ).delete()
    for run, serial, par in ((parent, 0.6, 0.3), (clone, 0.2, 2.0)):
        MetricPoint.objects.bulk_create(
            MetricPoint(run=run, step=s, key=k, value=v)
            for s in range(1, 11)
            for k, v in (("serial/mean", serial), ("parallelism/mean", par))
        )
    return clone


def test_a_serial_collapse_clone_is_judged_by_the_statistic_its_alert_named(
    hacked, owner_client
):
    clone = _serial_clone(hacked, {"serial_late": 0.6, "threshold": 0.5})
    data = owner_client.get(f"/api/runs/{clone.pk}/repair").json()
    assert [(s["metric"], s["side"], s["threshold"]) for s in data["stats"]] == [
        ("serial/mean", "above", 0.5)
    ]
    (share,) = data["stats"]
    assert share["parent"]["late_hacked"] and not share["clone"]["late_hacked"]
    assert data["zone"]["parent"]["steps"] == 10 and data["zone"]["clone"]["steps"] == 0


def test_fewer_than_half_a_sub_agent_a_stage_is_no_serial_collapse(
    hacked, owner_client
):
    # The alert fired on sub-agents per stage; the parent's 0.3 spawns none: below
    # the detector's floor (min_parallelism 0.5), not in the hack's zone.
    clone = _serial_clone(hacked, {"parallelism_late": 0.9, "threshold": 1.2})
    data = owner_client.get(f"/api/runs/{clone.pk}/repair").json()
    assert [(s["metric"], s["floor"]) for s in data["stats"]] == [
        ("parallelism/mean", 0.5)
    ]
    (par,) = data["stats"]
    assert par["parent"]["steps_hacked"] == 0 and not par["parent"]["late_hacked"]
