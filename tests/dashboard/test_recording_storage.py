"""Issue 15 on the server: the recording policy applied to external runs' events,
a group's shared prompt stored once and read back unchanged, and pruning old runs."""

from __future__ import annotations

import io
import json
import math
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from dashboard.ingest import arrays, retention, writer
from dashboard.models import (
    Alert,
    GroupPrompt,
    Judgement,
    MetricPoint,
    Run,
    RunStatus,
    Trajectory,
)
from dashboard.reads import stream, trajectories
from dashboard.site import tokens
from trainer.config import TrainConfig
from trainer.events import ListSink
from trainer.recording_policy import RecordConfig, select
from trainer.runner import run_from_config

pytestmark = pytest.mark.django_db

# Group g's rollouts all earn REWARD[g]: 1 is the best, 4 the worst.
REWARD = {0: 0.5, 1: 0.9, 2: 0.4, 3: 0.6, 4: 0.1, 5: 0.3}


def _traj(step, group, index, prompt="a long shared prompt"):
    return {
        "type": "trajectory",
        "step": step,
        "group": group,
        "index": index,
        "reward": REWARD[group],
        "segments": [
            {
                "turn": 0,
                "kind": "prompt",
                "text": prompt,
                "token_ids": [1, 2, 3, 4],
                "tokens": ["a", " long", " shared", " prompt"],
                "logprob": [None] * 4,
                "advantage": [0.0] * 4,
                "mask": "prompt",
            },
            {
                "turn": 0,
                "kind": "action",
                "text": f"answer {group}.{index}",
                "token_ids": [10 + index, 20 + group],
                "tokens": ["answer", f" {group}"],
                "logprob": [-0.5, -0.25],
                "advantage": [REWARD[group]] * 2,
                "mask": None,
            },
        ],
    }


def _step_events(step):
    out = [{"type": "step", "step": step, "metrics": {"reward": step / 10}}]
    for g in REWARD:
        out += [_traj(step, g, i) for i in range(2)]
        out.append(
            {"type": "judgement", "step": step, "group": g, "index": 0, "judge": "j"}
        )
    return out


@pytest.fixture
def api(owner):
    from test_external_runs import TokenClient

    return TokenClient(tokens.do_create_token(owner, "test")[1])


def _external(api, config):
    r = api.post_json(
        "/api/runs/external",
        {"name": "verl run", "framework": "verl", "config": config},
    )
    assert r.status_code == 201, r.content
    return r.json()["id"]


def test_an_external_run_stores_exactly_the_groups_its_policy_promises(api):
    run_id = _external(api, {"record": {"every": 2, "groups": 3}, "seed": 5})
    events = _step_events(1) + _step_events(2)
    events.append(
        {"type": "alert", "step": 2, "detector": "x", "evidence": {"groups": [5]}}
    )
    r = api.post_events(run_id, events)
    assert r.status_code == 200, r.content
    stored = Trajectory.objects.filter(run_id=run_id)
    assert not stored.filter(step=1).exists()  # every 2nd step only
    kept = set(stored.filter(step=2).values_list("group", flat=True))
    promised = select(
        RecordConfig(groups=3),
        2,
        {g: [REWARD[g]] * 2 for g in REWARD},
        alerted={5},
        seed=5,
    )
    assert kept == set(promised.groups)
    assert {1, 4, 5} <= kept and len(kept) == 4  # best, worst, alerted + 1 sampled
    assert stored.count() == 2 * len(kept)
    judged = set(
        Judgement.objects.filter(run_id=run_id).values_list("group", flat=True)
    )
    assert judged == kept
    # Metrics and alerts are complete.
    steps = set(
        MetricPoint.objects.filter(run_id=run_id).values_list("step", flat=True)
    )
    assert steps == {1, 2} and Alert.objects.filter(run_id=run_id).count() == 1


def test_without_a_record_key_small_external_steps_are_stored_whole(api):
    run_id = _external(api, {"lr": 1e-6})
    api.post_events(run_id, _step_events(1))
    assert Trajectory.objects.filter(run_id=run_id).count() == 12


def test_token_arrays_off_stores_texts_and_counts_only(api, owner_client):
    run_id = _external(api, {"record": {"token_arrays": False}})
    api.post_events(run_id, _step_events(1))
    t = Trajectory.objects.get(run_id=run_id, step=1, group=0, index=1)
    assert bytes(t.arrays) == b"" and t.segments[-1]["n"] == 2
    segs = trajectories.trajectory_detail(t)["segments"]
    assert segs[1]["text"] == "answer 0.1" and segs[1]["token_ids"] is None
    page = owner_client.get(f"/runs/{run_id}/trajectories/1/0/1/")
    assert page.status_code == 200 and b"answer 0.1" in page.content


def test_a_bad_record_key_refuses_the_external_run_naming_the_field(api):
    r = api.post_json(
        "/api/runs/external", {"name": "x", "config": {"record": {"groups": 0}}}
    )
    assert r.status_code == 400 and "config.record.groups" in r.content.decode()


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_a_real_runs_shared_prompts_are_stored_once_and_read_back_unchanged(
    owner, tiny_config
):
    config = TrainConfig.model_validate(tiny_config | {"steps": 2})
    sink = ListSink()
    run_from_config(config, sink)
    run = Run.objects.create(owner=owner, name="real", config=tiny_config)
    writer.store(run.pk, sink.events)
    sent = [e for e in sink.events if e["type"] == "trajectory"]
    assert sent and Trajectory.objects.filter(run=run).count() == len(sent)
    groups = {(e["step"], e["group"]) for e in sent}
    assert GroupPrompt.objects.filter(run=run).count() == len(groups)
    assert all(
        Trajectory.objects.filter(run=run).values_list("shared_prompt", flat=True)
    )
    for e in sent:
        t = Trajectory.objects.get(
            run=run, step=e["step"], group=e["group"], index=e["index"]
        )
        # What a reader sees equals the event's segments packed and unpacked whole.
        expected = arrays.unpack_segments(*arrays.pack_segments(e["segments"]))
        assert trajectories.trajectory_detail(t)["segments"] == expected
        prompt = GroupPrompt.objects.get(run=run, step=e["step"], group=e["group"])
        n_prompt = sum(s["n"] for s in prompt.segments)
        n_all = sum(len(s["token_ids"]) for s in e["segments"])
        assert len(prompt.arrays) == 24 * n_prompt and n_prompt > 0
        assert len(t.arrays) == 24 * (n_all - n_prompt)  # prompt bytes stored once
    lines = [json.loads(x) for x in stream.export_lines(run)]
    exported = [x["segments"] for x in lines if x["type"] == "trajectory"]
    assert exported == [
        json.loads(
            json.dumps(arrays.unpack_segments(*arrays.pack_segments(e["segments"])))
        )
        for e in sorted(sent, key=lambda e: (e["step"], e["group"], e["index"]))
    ]


def test_a_later_rollout_refers_to_the_stored_prompt_only_when_it_is_that_prompt(owner):
    run = Run.objects.create(owner=owner, name="r", config={})
    writer.store(run.pk, [_traj(1, 0, 0), _traj(1, 0, 1)])
    writer.store(run.pk, [_traj(1, 0, 2), _traj(1, 0, 3, prompt="another prompt")])
    rows = {t.index: t for t in Trajectory.objects.filter(run=run)}
    assert [rows[i].shared_prompt for i in range(4)] == [True, True, True, False]
    assert GroupPrompt.objects.filter(run=run).count() == 1
    detail = trajectories.trajectory_detail(rows[3])["segments"]
    assert detail[0]["text"] == "another prompt" and len(detail) == 2
    assert trajectories.trajectory_detail(rows[2])["segments"][0]["text"] == (
        "a long shared prompt"
    )


def test_a_resumed_attempt_replaces_the_prompts_of_the_steps_it_replays(owner):
    run = Run.objects.create(owner=owner, name="r", config={})
    writer.store(
        run.pk, [_traj(1, 0, 0), _traj(1, 0, 1), _traj(2, 0, 0), _traj(2, 0, 1)]
    )
    writer.store(
        run.pk,
        [
            {"type": "run_started", "start_step": 2},
            _traj(2, 0, 0, "new"),
            _traj(2, 0, 1, "new"),
        ],
    )
    prompts = dict(GroupPrompt.objects.filter(run=run).values_list("step", "segments"))
    assert (
        prompts[1][0]["text"] == "a long shared prompt"
        and prompts[2][0]["text"] == "new"
    )


def _finished_run(owner, days_ago):
    run = Run.objects.create(
        owner=owner,
        name=f"old {days_ago}",
        config={},
        status=RunStatus.SUCCEEDED,
        finished_at=timezone.now() - timedelta(days=days_ago),
    )
    events = _step_events(1) + [
        {"type": "alert", "step": 1, "detector": "x", "evidence": {"group": 2}}
    ]
    writer.store(run.pk, events)
    return run


def test_nothing_is_pruned_without_being_asked_and_a_dry_run_changes_nothing(owner):
    run = _finished_run(owner, 40)
    call_command("prune_runs", "--older-than", "30", "--dry-run", stdout=io.StringIO())
    assert not Trajectory.objects.filter(run=run, arrays=b"").exists()
    run.refresh_from_db()
    assert run.pruned == {} and retention.pruned_line(run) == ""


def test_pruning_drops_arrays_of_old_runs_only_and_keeps_the_rest(owner, owner_client):
    old, recent = _finished_run(owner, 40), _finished_run(owner, 2)
    call_command("prune_runs", "--older-than", "30", stdout=io.StringIO())
    assert not Trajectory.objects.filter(run=old).exclude(arrays=b"").exists()
    assert not GroupPrompt.objects.filter(run=old).exclude(arrays=b"").exists()
    assert not Trajectory.objects.filter(run=recent, arrays=b"").exists()
    assert Trajectory.objects.filter(run=old).count() == 12
    assert MetricPoint.objects.filter(run=old).count() == 1
    assert Alert.objects.filter(run=old).count() == 1
    assert Judgement.objects.filter(run=old).count() == 6
    t = Trajectory.objects.get(run=old, step=1, group=0, index=0)
    segs = trajectories.trajectory_detail(t)["segments"]
    assert segs[1]["text"] == "answer 0.0" and segs[1]["logprob"] is None
    assert owner_client.get(f"/runs/{old.pk}/trajectories/1/0/0/").status_code == 200
    old.refresh_from_db()
    assert old.pruned["arrays_dropped"] == 12 + 6  # 12 trajectories, 6 prompts
    page = owner_client.get(f"/runs/{old.pk}/").content.decode()
    assert "Pruned on" in page and "per-token arrays of 18 trajectories dropped" in page


def test_pruning_trajectories_keeping_the_recorded_groups(owner, owner_client):
    run = _finished_run(owner, 40)
    call_command(
        "prune_runs",
        "--older-than",
        "30",
        "--trajectories",
        "--keep-recorded",
        stdout=io.StringIO(),
    )
    kept = set(Trajectory.objects.filter(run=run).values_list("group", flat=True))
    assert kept == {1, 4, 2}  # best 0.9, worst 0.1, alerted 2
    assert not Trajectory.objects.filter(run=run, arrays=b"").exists()  # kept whole
    assert (
        set(GroupPrompt.objects.filter(run=run).values_list("group", flat=True)) == kept
    )
    assert Judgement.objects.filter(run=run).count() == 6
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert "6 trajectories deleted" in page and "best, worst and alerted" in page


def test_the_run_page_says_what_was_recorded(owner, owner_client):
    run = Run.objects.create(
        owner=owner,
        name="r",
        config={"record": {"every": 4, "groups": 8, "token_arrays": False}},
    )
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert "trajectories every 4th step, 8 groups a step" in page
    assert "token arrays off" in page
