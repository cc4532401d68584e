"""Alerts lead to their evidence on the server (issue 12.4, issue 15's alerted
groups): detectors run on an external run's events name the trajectories that made
them fire, the recording policy keeps those groups, and the API and the run page
link each alert to its stored trajectories."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.models import Alert, Run, Trajectory
from dashboard.site import tokens
from trainer.event_schema import EventError, check_event

pytestmark = pytest.mark.django_db

LOW = {(1, 0), (1, 1), (3, 1)}  # the rollouts whose policy stopped exploring


@pytest.fixture
def api(owner):
    from test_external_runs import TokenClient

    return TokenClient(tokens.do_create_token(owner, "test")[1])


def _run(api) -> str:
    # Nothing recorded but what an alert points at: 1 group, every 1000th step.
    r = api.post_json(
        "/api/runs/external",
        {
            "name": "verl run",
            "framework": "verl",
            "config": {"record": {"every": 1000, "groups": 1}},
        },
    )
    assert r.status_code == 201, r.content
    return r.json()["id"]


def _metrics(steps, entropy):
    return [
        {"type": "step", "step": s, "metrics": {"entropy": entropy, "reward": 0.5}}
        for s in steps
    ]


def _rollouts(step):
    out = []
    for g in range(4):
        for i in range(2):
            e = 0.01 if (g, i) in LOW else 1.9
            out.append(
                {
                    "type": "trajectory",
                    "step": step,
                    "group": g,
                    "index": i,
                    "task_id": f"task-{g}",
                    "reward": g / 4,
                    "length": 5,
                    "segments": [
                        {"kind": "prompt", "text": "<b>q</b>", "mask": "prompt"},
                        {
                            "kind": "action",
                            "text": "a",
                            "token_ids": [1, 2],
                            "entropy": [e, e],
                        },
                    ],
                }
            )
    return out


def _alert(run_id) -> Alert:
    alerts = list(Alert.objects.filter(run_id=run_id))
    assert [a.detector for a in alerts] == ["entropy_collapse"]
    return alerts[0]


def _stored(run_id, step):
    return set(
        Trajectory.objects.filter(run_id=run_id, step=step).values_list(
            "group", "index"
        )
    )


def test_a_server_alert_names_the_rollouts_that_fired_it_and_they_are_kept(api):
    run_id = _run(api)
    assert api.post_events(run_id, _metrics(range(1, 7), 2.0)).status_code == 200
    batch = []
    for s in range(7, 13):
        batch += _metrics([s], 0.01) + _rollouts(s)
    assert api.post_events(run_id, batch).status_code == 200
    alert = _alert(run_id)
    named = {(t["group"], t["index"]) for t in alert.trajectories}
    assert named == LOW
    assert {t["task_id"] for t in alert.trajectories} == {"task-1", "task-3"}
    assert alert.evidence["trajectories_matched"] == 3
    # The policy records no step, yet the alerted step keeps the alerted groups.
    assert _stored(run_id, alert.step) == {(g, i) for g in (1, 3) for i in (0, 1)}
    assert (
        Trajectory.objects.filter(run_id=run_id).exclude(step=alert.step).count() == 0
    )


def test_rollouts_arriving_after_their_steps_alert_are_judged_and_kept(api):
    """A trainer that sends a step's metrics before its rollouts (our order)."""
    run_id = _run(api)
    api.post_events(run_id, _metrics(range(1, 7), 2.0) + _metrics(range(7, 13), 0.01))
    alert = _alert(run_id)
    assert alert.trajectories == []  # nothing of that step has arrived yet
    later = [ev for s in range(7, 13) for ev in _rollouts(s)]
    assert api.post_events(run_id, later).status_code == 200
    alert.refresh_from_db()
    assert {(t["group"], t["index"]) for t in alert.trajectories} == LOW
    assert alert.evidence["trajectories_matched"] == 3
    assert _stored(run_id, alert.step) == {(g, i) for g in (1, 3) for i in (0, 1)}


def test_the_api_and_the_run_page_link_each_alert_to_its_stored_trajectories(
    api, owner_client
):
    run_id = _run(api)
    batch = _metrics(range(1, 7), 2.0)
    for s in range(7, 13):
        batch += _metrics([s], 0.01) + _rollouts(s)
    # The producer's own alert, pointing at a stored rollout and at one never sent.
    batch.append(
        {
            "type": "alert",
            "step": 12,
            "detector": "mine",
            "message": "look",
            "trajectories": [
                {"group": 0, "index": 1, "why": "<script>x</script>"},
                {"group": 9, "index": 0},
            ],
        }
    )
    api.post_events(run_id, batch)
    body = api.get(f"/api/runs/{run_id}/alerts").json()["alerts"]
    by_name = {a["detector"]: a for a in body}
    server = by_name["entropy_collapse"]
    assert {(t["group"], t["index"]) for t in server["trajectories"]} == LOW
    for t in server["trajectories"]:
        assert t["stored"] is True
        assert t["url"] == reverse(
            "pages:trajectory", args=[run_id, server["step"], t["group"], t["index"]]
        )
        assert owner_client.get(t["url"]).status_code == 200
    mine = by_name["mine"]["trajectories"]
    assert [(t["group"], t["stored"]) for t in mine] == [(0, True), (9, False)]
    assert mine[1]["url"] is None
    assert (12, 0) in {
        (s, g)
        for s, g in Trajectory.objects.filter(run_id=run_id).values_list(
            "step", "group"
        )
    }  # the producer's alert kept its group too

    page = owner_client.get(f"/runs/{run_id}/").content.decode()
    for t in server["trajectories"]:
        assert f'href="{t["url"]}" data-evidence-link' in page
    assert f'href="{mine[0]["url"]}" data-evidence-link' in page
    assert "group 9 #0 (not stored)" in page
    assert "<script>x</script>" not in page and "&lt;script&gt;x" in page
    # The home page's recent alerts lead to the run page's evidence list too.
    home = owner_client.get("/").content.decode()
    assert (
        f'href="/runs/{run_id}/#alerts" data-home-evidence>2 evidence trajectories'
        in home
    )


def test_alert_events_without_trajectories_stay_valid_and_bad_ones_name_the_field():
    check_event({"type": "alert", "step": 3, "detector": "d", "evidence": {}})
    check_event(
        {
            "type": "alert",
            "step": 3,
            "detector": "d",
            "trajectories": [{"group": 1, "index": 0, "task_id": "t", "why": "w"}],
        }
    )
    with pytest.raises(EventError) as info:
        check_event(
            {
                "type": "alert",
                "step": 3,
                "detector": "d",
                "trajectories": [{"group": -1, "index": 0}],
            }
        )
    assert info.value.field.startswith("trajectories")


def test_the_servers_evidence_reads_a_trajectorys_own_metrics_and_judges(api):
    from dashboard.ingest.detection import trajectory_rows

    run_id = _run(api)
    run = Run.objects.get(pk=run_id)
    events = [
        {**_rollouts(3)[0], "metrics": {"parallelism": 1.0, "bad": "x"}},
        {"type": "judgement", "step": 3, "group": 0, "index": 0, "judge": "a",
         "score": 0.9},
        {"type": "judgement", "step": 3, "group": 0, "index": 0, "judge": "b",
         "score": 0.5},
    ]  # fmt: skip
    [(key, numbers)] = trajectory_rows(run, 3, events)
    assert key == (0, 0, "task-0")
    assert numbers == {
        "parallelism": 1.0,
        "length": 5.0,
        "truncated": 0.0,
        "entropy": 1.9,
        "judge/score": pytest.approx(0.7),
        "reward": 0.0,  # what no_learning_signal's evidence compares within a group
        "group_zero_std": 0.0,  # a group of one rollout: no verdict
        "group_size": 1.0,
    }


def test_a_reason_shared_by_neighbouring_rollouts_is_written_once():
    """A newcomer's shortcut alert repeated "(2 tokens (0.4x the early mean), not
    solved)" after each of its 14 rollouts: once, after the last of those sharing it."""
    from dashboard.pages.templatetags.pages_tags import why_once

    same = "2 tokens (0.4x the early mean), not solved"
    refs = [{"group": 0, "index": i, "why": same} for i in range(3)]
    refs += [{"group": 1, "index": 0, "why": "other"}, {"group": 1, "index": 1}]
    shown = [why for _, why in why_once(refs)]
    assert shown == ["", "", same, "other", ""]
    assert why_once(None) == []
    html = render_evidence(refs)
    assert html.count(same) == 4  # the three links' titles and the reason once
    assert html.count(f"({same})") == 1 and "(other)" in html


def render_evidence(refs):
    from django.template import Context, Template

    t = Template(
        "{% load pages_tags %}{% for t, why in refs|why_once %}"
        '<a title="{{ t.why }}">g{{ t.group }}</a>{% if why %} ({{ why }}){% endif %}'
        "{% endfor %}"
    )
    return t.render(Context({"refs": refs}))
