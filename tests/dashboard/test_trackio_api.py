"""/trackio/: trackio's HTTP API as its client speaks it (docs/trackio.md), answered
through the external runs' write path. The shapes of the entries are the client's
(``trackio/run.py``: ``log``, ``log_system``, ``alert``)."""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import Client

from dashboard.models import Alert, EntryReceipt, MetricPoint, Run, Trajectory
from dashboard.site import limits, tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(owner):
    return tokens.do_create_token(owner, "trackio")[1]


@pytest.fixture
def call(token):
    client = Client(enforce_csrf_checks=True)

    def _call(name, kwargs=None, *, args=None, headers=None, query=""):
        body = {"args": args or [], "kwargs": kwargs or {}}
        return client.post(
            f"/trackio/api/{name}{query}",
            json.dumps(body),
            content_type="application/json",
            headers={"X-Trackio-Write-Token": token} if headers is None else headers,
        )

    return _call


RUN_ID = uuid.uuid4().hex


def entry(metrics, step, *, run="r1", run_id=RUN_ID, config=None, log_id=None):
    return {
        "project": "proj",
        "run": run,
        "run_id": run_id,
        "metrics": metrics,
        "step": step,
        "config": config,
        "log_id": log_id or uuid.uuid4().hex,
    }


def trl_table(step, rows):
    return {"_type": "trackio.table", "_value": [{"step": step, **r} for r in rows]}


def test_version_is_public_and_says_api_version_1(client):
    answer = client.get("/trackio/version")
    assert answer.status_code == 200 and answer.json()["api_version"] == 1


def test_an_unknown_call_is_a_404_in_trackios_shape(call):
    answer = call("delete_project", {"project": "p"})
    assert answer.status_code == 404
    assert answer.json() == {"data": None, "error": "Unknown API: delete_project"}


def test_the_token_may_be_the_header_or_the_write_token_of_the_url(call, token):
    assert call("get_all_projects").json() == {"data": [], "error": None}
    by_query = call("get_all_projects", headers={}, query=f"?write_token={token}")
    assert by_query.json() == {"data": [], "error": None}
    refused = call("get_all_projects", headers={"X-Trackio-Write-Token": "arl_nope"})
    assert refused.status_code == 200  # the client reads the error of a 2xx only
    assert refused.json()["data"] is None
    assert refused.json()["error"].startswith("write_token: not a live API token")


def test_bulk_log_creates_the_run_in_its_projects_group(call, owner):
    config = {"lr": 0.1, "_Username": None, "_Created": "x", "_Group": None}
    logs = [
        entry({"loss": 0.5, "acc": "NaN"}, 0, config=config),
        entry({"loss": 0.25}, 1),
    ]
    answer = call("bulk_log", {"logs": logs, "hf_token": None})
    assert answer.json()["error"] is None
    run = Run.objects.get(owner=owner, external_id=RUN_ID)
    assert (run.group, run.name, run.framework, run.config) == (
        "proj",
        "r1",
        "trackio",
        {"lr": 0.1},
    )
    assert run.last_step == 1
    points = MetricPoint.objects.filter(run=run, key="loss").order_by("step")
    assert [(p.step, p.value) for p in points] == [(0, 0.5), (1, 0.25)]
    runs = call("get_runs_for_project", {"project": "proj"}).json()["data"]
    assert [(r["id"], r["name"]) for r in runs] == [(RUN_ID, "r1")]
    summary = call("get_run_summary", {"project": "proj", "run_id": RUN_ID}).json()
    assert summary["data"]["last_step"] == 1
    assert call("get_all_projects").json()["data"] == ["proj"]


def test_a_resent_batch_is_a_duplicate_by_its_log_ids(call, owner):
    logs = [entry({"loss": 0.5}, 0), entry({"loss": 0.4}, 1)]
    first = call("bulk_log", {"logs": logs}).json()["data"]
    again = call("bulk_log", {"logs": logs}).json()["data"]
    assert first == {"accepted": 2, "duplicates": 0}
    assert again == {"accepted": 0, "duplicates": 2}
    assert EntryReceipt.objects.count() == 2
    system = [{**logs[0], "metrics": {"cpu": 10.0}, "log_id": uuid.uuid4().hex}]
    call("bulk_log_system", {"logs": system})
    call("bulk_log", {"logs": [entry({"loss": 0.3}, 5)]})
    # The same system sample sent again after the run moved on: still one point.
    assert call("bulk_log_system", {"logs": system}).json()["data"]["duplicates"] == 1
    assert MetricPoint.objects.filter(key="system/cpu").count() == 1


def test_logging_again_to_a_run_finished_here_resumes_it(call, owner):
    """trackio cannot reopen a run (nor finish one): a finished run that gets new
    entries is reopened, while a re-sent entry changes nothing."""
    logs = [entry({"loss": 0.5}, 0)]
    call("bulk_log", {"logs": logs})
    run = Run.objects.get(owner=owner, external_id=RUN_ID)
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    assert call("bulk_log", {"logs": logs}).json()["data"]["duplicates"] == 1
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    answer = call("bulk_log", {"logs": [entry({"loss": 0.4}, 1)]}).json()
    assert answer["error"] is None and answer["data"]["accepted"] == 1
    assert Run.objects.get(pk=run.pk).status == "running"


def test_a_bad_entry_refuses_the_call_naming_it_and_stores_nothing(call):
    logs = [entry({"loss": 0.5}, 0), entry({"x" * 201: 1.0}, 1)]
    answer = call("bulk_log", {"logs": logs}).json()
    assert answer["data"] is None and answer["error"].startswith("logs[1]: metrics")
    assert not Run.objects.exists() and not EntryReceipt.objects.exists()
    bad_step = call("bulk_log", {"logs": [entry({"loss": 1.0}, -1)]}).json()
    assert bad_step["error"].startswith("logs[0].step: must be a whole number")
    no_project = call("bulk_log", {"logs": [{**entry({}, 0), "project": ""}]}).json()
    assert no_project["error"].startswith("logs[0].project: must be a string")
    missing = call("bulk_log", {}).json()
    assert missing["error"] == "kwargs.logs: required"
    assert not Run.objects.exists()


def test_trls_values_land_at_its_global_step_under_our_names(call, owner):
    config = {
        "num_generations": 2,
        "report_to": ["trackio"],
        "reward_weights": [1, 0.5],
    }
    metrics = {"train/reward": 0.75, "train/kl": 0.01, "train/global_step": 3}
    rows = [
        {
            "prompt": "2+2?",
            "completion": "4",
            "says": 1.0,
            "short": 1.0,
            "advantage": 0.7,
        },
        {
            "prompt": "3+3?",
            "completion": "6",
            "says": 1.0,
            "short": 0.0,
            "advantage": 0.0,
        },
        {
            "prompt": "2+2?",
            "completion": "5",
            "says": 0.0,
            "short": 1.0,
            "advantage": -0.7,
        },
    ]
    logs = [
        entry(metrics, 0, config=config),
        entry({"completions": trl_table(3, rows)}, 1),
    ]
    assert call("bulk_log", {"logs": logs}).json()["error"] is None
    run = Run.objects.get(external_id=RUN_ID)
    assert run.framework == "trl" and run.last_step == 3
    keys = set(MetricPoint.objects.filter(run=run).values_list("key", "step"))
    assert keys == {("reward", 3), ("kl", 3)}
    trajs = Trajectory.objects.filter(run=run, step=3).order_by("group", "index")
    got = [(t.group, t.index, t.reward, t.advantage) for t in trajs]
    # Siblings by identical prompt; reward = says + 0.5 * short (reward_weights).
    assert got == [(0, 0, 1.5, 0.7), (0, 1, 0.5, -0.7), (1, 0, 1.0, 0.0)]
    assert trajs[0].rewards["components"] == {"says": 1.0, "short": 1.0}


def test_trls_log_extra_columns_are_facts_as_in_its_parquet_and_wandb_tables(call):
    # TRL writes the reward functions' columns, then log_extra's (numbers too): the
    # rewards are those it logged as train/rewards/<name>/mean, in this call or in
    # one stored before (the rule of trainer.importers.completions).
    config = {"num_generations": 2, "report_to": ["trackio"]}
    rows = [
        {"prompt": "q", "completion": "a", "says": 1.0, "n_calls": 3, "advantage": 0.5},
        {
            "prompt": "q",
            "completion": "b",
            "says": 0.0,
            "n_calls": 7,
            "advantage": -0.5,
        },
    ]
    metrics = {"train/rewards/says/mean": 0.5, "train/global_step": 1}
    logs = [
        entry(metrics, 0, config=config),
        entry({"completions": trl_table(1, rows)}, 1),
    ]
    assert call("bulk_log", {"logs": logs}).json()["error"] is None
    later = [entry({"completions": trl_table(2, rows)}, 2)]
    assert call("bulk_log", {"logs": later}).json()["error"] is None
    run = Run.objects.get(external_id=RUN_ID)
    for step in (1, 2):
        first = Trajectory.objects.get(run=run, step=step, group=0, index=0)
        assert first.rewards["components"] == {"says": 1.0}
        assert first.reward == 1.0 and first.facts["n_calls"] == 3


def test_traces_of_one_step_sent_apart_are_siblings_by_prompt(call):
    def trace(answer, reward):
        return {
            "_type": "trackio.trace",
            "messages": [
                {"role": "user", "content": "Who wrote Dune?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "search", "arguments": '{"q": "Dune"}'}}
                    ],
                },
                {"role": "tool", "content": "Frank Herbert"},
                {"role": "assistant", "content": answer},
            ],
            "metadata": {"reward": reward},
            "spans": [],
        }

    call("bulk_log", {"logs": [entry({"rollout": trace("Herbert", 1.0)}, 4)]})
    call("bulk_log", {"logs": [entry({"rollout": [trace("Asimov", 0.0)]}, 4)]})
    trajs = Trajectory.objects.filter(step=4).order_by("index")
    assert [(t.group, t.index, t.reward) for t in trajs] == [(0, 0, 1.0), (0, 1, 0.0)]
    assert trajs[0].num_turns == 2
    steps = trajs[0].agent_steps
    assert [s["tool"] for s in steps] == ["search", ""]
    assert steps[0]["observation"] == "Frank Herbert"
    assert (
        '<tool_call>{"name": "search", "arguments": {"q": "Dune"}}'
        in steps[0]["action"]
    )


def test_alerts_become_alerts_of_the_run(call):
    alert = {
        "project": "proj",
        "run": "r1",
        "run_id": RUN_ID,
        "title": "loss spiked",
        "text": "loss 9.0",
        "level": "error",
        "step": 7,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "alert_id": uuid.uuid4().hex,
    }
    assert call("bulk_alert", {"alerts": [alert]}).json()["error"] is None
    assert call("bulk_alert", {"alerts": [alert]}).json()["data"]["duplicates"] == 1
    (row,) = Alert.objects.all()
    assert (row.step, row.detector, row.severity, row.message) == (
        7,
        "trackio:loss spiked",
        "error",
        "loss 9.0",
    )


def test_the_single_log_call_takes_positional_args(call):
    answer = call("log", args=["proj", "r2", {"loss": 1.0}, 2, None, "id-2"])
    assert answer.json()["error"] is None
    run = Run.objects.get(external_id="id-2")
    assert run.name == "r2" and MetricPoint.objects.get(run=run).step == 2


def test_another_users_run_id_makes_the_callers_own_run(call, other):
    Run.objects.create(
        owner=other, name="theirs", config={}, external=True, external_id=RUN_ID
    )
    call("bulk_log", {"logs": [entry({"loss": 1.0}, 0)]})
    mine = Run.objects.exclude(owner=other).get(external_id=RUN_ID)
    assert mine.name == "r1" and not MetricPoint.objects.exclude(run=mine).exists()


def test_trackio_bodies_have_their_own_limit(settings):
    settings.TRACKIO_MAX_BODY_BYTES = 10_000
    assert limits.body_limit("/trackio/api/bulk_log") == 10_000
    assert limits.body_limit("/api/runs") == settings.REQUEST_MAX_BODY_BYTES


def test_a_projects_runs_are_a_group_shown_and_filtered_in_the_list(
    call, owner, owner_client, token
):
    call("bulk_log", {"logs": [entry({"loss": 1.0}, 0, run="<b>a</b>")]})
    call("bulk_log", {"logs": [{**entry({"loss": 1.0}, 0, run="b"), "run_id": "id-b"}]})
    Run.objects.create(owner=owner, name="native", config={}, group="")
    page = owner_client.get("/runs/").content.decode()
    assert '<th class="col-group wide-only">Group</th>' in page
    assert 'href="/runs/?group=proj"' in page and "&lt;b&gt;a&lt;/b&gt;" in page
    assert '<option value="proj">' in page
    only = owner_client.get("/runs/?group=proj").content.decode()
    assert "native" not in only and "&lt;b&gt;a&lt;/b&gt;" in only and ">b</a>" in only
    api = Client().get("/api/runs?group=proj", HTTP_AUTHORIZATION=f"Bearer {token}")
    names = {r["name"]: r["group"] for r in api.json()["runs"]}
    assert names == {"<b>a</b>": "proj", "b": "proj"}
    bad = owner_client.get("/runs/?group=a%00b")
    assert bad.status_code == 400 and "group:" in bad.content.decode()
