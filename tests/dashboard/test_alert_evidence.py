"""Alerts lead to their evidence on the server (issue 12.4, issue 15's alerted
groups): detectors run on an external run's events name the trajectories that made
them fire, the recording policy keeps those groups, and the API and the run page
link each alert to its stored trajectories."""

from __future__ import annotations

import re

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


def test_each_reason_is_written_once_with_its_rollouts_under_it():
    """A newcomer's shortcut alert repeated "(2 tokens (0.4x the early mean), not
    solved)" after each of its 14 rollouts; written once after the last of them, 9
    rollouts read as having none. Each reason once, its rollouts under it, a group's
    together: "2 tokens ..., not solved (3): group 0 #0, #1; group 2 #4"."""
    from dashboard.reads.evidence import by_reason

    same = "2 tokens (0.4x the early mean), not solved"
    refs = [{"group": 0, "index": i, "why": same} for i in range(2)]
    refs += [{"group": 1, "index": 0, "why": "other"}, {"group": 1, "index": 1}]
    refs += [{"group": 2, "index": 4, "why": same}]
    got = by_reason(refs)
    assert [(r["why"], r["count"]) for r in got] == [(same, 3), ("other", 1), ("", 1)]
    assert [
        (g["group"], [t["index"] for t in g["refs"]]) for g in got[0]["groups"]
    ] == [
        (0, [0, 1]),
        (2, [4]),
    ]
    assert by_reason(None) == [] and by_reason(["junk", 3]) == []
    for t in refs:
        t["url"] = f"/t/{t['group']}/{t['index']}/"
    refs[-1]["url"] = None
    html = render_evidence(refs)
    assert html.count(same) == 1 + 2  # the reason once, and two links' titles
    text = re.sub(r"<[^>]+>", "", html)
    assert f"{same} (3): group 0 #0, #1; group 2 #4 (not stored)" in " ".join(
        text.split()
    )
    assert "other: group 1 #0" in text and "no reason given: group 1 #1" in text
    assert "Evidence: 5 rollouts of step 7 show it" in " ".join(text.split())
    assert "matched in all" not in text


def test_reasons_alike_but_for_their_numbers_share_a_line_with_ranges():
    """28 rollouts' "entropy 1.166 nats/token", each its own number, were 28 lines."""
    from dashboard.reads.evidence import by_reason

    refs = [
        {
            "group": i // 4,
            "index": i % 4,
            "why": f"entropy {0.5 + i / 100:.3f} nats/token",
        }
        for i in range(28)
    ]
    refs.append({"group": 9, "index": 0, "why": "2 tokens (0.4x the early mean)"})
    refs.append({"group": 9, "index": 1, "why": "10 tokens (1.2x the early mean)"})
    got = by_reason(refs)
    assert [(r["why"], r["count"]) for r in got] == [
        ("entropy 0.500\u20130.770 nats/token", 28),
        ("2\u201310 tokens (0.4\u20131.2x the early mean)", 2),
    ]
    assert len(got[0]["groups"]) == 7  # each group's rollouts together
    for t in refs:
        t["url"] = f"/t/{t['group']}/{t['index']}/"
    html = render_evidence(refs)
    assert html.count("data-evidence-reason") == 2
    assert 'title="entropy 0.530 nats/token"' in html  # each its own in its title


def render_evidence(refs):
    from django.template.loader import render_to_string

    from dashboard.reads.evidence import by_reason

    a = {"detector": "shortcut", "step": 7, "trajectories": refs, "evidence": {}}
    a["evidence_groups"] = by_reason(refs)
    return render_to_string("pages/partials/alert_evidence.html", {"a": a})


def test_evidence_numbers_are_named_in_words_with_their_keys():
    from dashboard.reads.evidence import evidence_rows, label

    rows = evidence_rows(
        {
            "window": [1, 8],
            "length_early": 12.3456,
            "since": "earlier",
            "success": [0.5, 1.0],
            "trajectories_matched": 16,
            "plugin_thing_late": 2,
            "my_key": True,
            "gone": None,
        }
    )
    got = {r["key"]: (r["label"], r["value"]) for r in rows}
    assert got["window"] == ("steps compared", "1 to 8")
    late = {r["key"]: r["value"] for r in evidence_rows({"window": [12345, 12354]})}
    assert late["window"] == "12345 to 12354"  # whole numbers whole, not 1.234e+04
    assert got["length_early"] == ("episode length (tokens), early half", "12.35")
    assert got["since"] == ("compared with", "the window's early half")
    assert got["success"] == ("success, last steps", "0.5, 1")
    assert got["trajectories_matched"][0] == "rollouts of this step that show it"
    assert got["plugin_thing_late"][0] == "plugin thing, late half"
    assert got["my_key"] == ("my key", "true") and got["gone"][1] == "—"
    assert evidence_rows("x") == []
    # every key our detectors write reads in words (no key left as itself)
    for key in ("parallelism_early", "finish_rate_late", "critical_steps_early",
                "zero_std_mean", "frac_reward_zero_std", "proxy_rise",
                "repetition_start", "single_share", "episodes_late", "floor"):  # fmt: skip
        assert label(key) != key.replace("_", " "), key


def test_a_live_alert_says_how_many_rollouts_matched_in_all():
    """The live page wrote "(N matched in all; the first K named)" only after a
    reload: the frame's alert carried no evidence."""
    from dashboard.ingest.fields import summarise
    from dashboard.live.frames import FrameParts

    parts = FrameParts()
    refs = [{"group": 0, "index": i, "why": "x"} for i in range(32)]
    for matched in (40, "40", True, None):
        ev = {"type": "alert", "step": 3, "detector": "shortcut", "message": "m"}
        summarise(
            {**ev, "trajectories": refs, "evidence": {"trajectories_matched": matched}},
            parts,
        )
    got = [a["evidence"]["trajectories_matched"] for a in parts.alerts]
    assert got == [40, None, None, None]  # a count, or nothing
