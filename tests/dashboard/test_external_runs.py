"""External runs over the HTTP API: tokens, creating a run, posting NDJSON events
(idempotent, all or nothing, limits), finishing, lost, server-side detectors."""

from __future__ import annotations

import gzip
import io
import json
import math
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from fake_runner import events_for_step

from dashboard.ingest.conflicts import Outcome
from dashboard.models import (
    Alert,
    ApiToken,
    MetricPoint,
    Run,
    RunStatus,
    Trajectory,
)
from dashboard.runs import external
from dashboard.site import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(owner):
    return tokens.do_create_token(owner, "test")[1]


@pytest.fixture
def api(token):
    """A client that authenticates with the token only, CSRF enforced."""
    return TokenClient(token)


class TokenClient:
    def __init__(self, token: str) -> None:
        self.client = Client(enforce_csrf_checks=True)
        self.auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def get(self, url):
        return self.client.get(url, **self.auth)

    def post_json(self, url, body):
        return self.client.post(
            url, json.dumps(body), content_type="application/json", **self.auth
        )

    def post_events(self, run_id, events, *, gzip_it=False, raw=None, **headers):
        body = raw if raw is not None else ndjson(events).encode()
        if gzip_it:
            body = gzip.compress(body)
            headers["HTTP_CONTENT_ENCODING"] = "gzip"
        return self.client.post(
            f"/api/runs/{run_id}/events",
            body,
            content_type="application/x-ndjson",
            **self.auth,
            **headers,
        )


def ndjson(events) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def new_run(api, **extra) -> str:
    body = {"name": "trl run", "framework": "trl", "config": {"lr": 1e-6}, **extra}
    r = api.post_json("/api/runs/external", body)
    assert r.status_code == 201, r.content
    return r.json()["id"]


def steps(*numbers):
    return [ev for s in numbers for ev in events_for_step(3, s)]


# --- tokens -------------------------------------------------------------------------
def test_create_token_prints_a_token_that_is_stored_only_as_a_digest(owner):
    out = io.StringIO()
    call_command("create_token", "owner", "--name", "laptop", stdout=out)
    token = out.getvalue().strip()
    row = ApiToken.objects.get(name="laptop")
    assert token.startswith("arl_") and len(token) > 40
    assert token not in (row.digest, row.prefix) and token.startswith(row.prefix)
    assert tokens.user_for_token(token) == owner


def test_a_token_authenticates_every_api_call_without_csrf(api, owner):
    assert api.get("/api/runs").status_code == 200
    run_id = new_run(api)  # a POST with CSRF enforced and no CSRF token
    assert Run.objects.get(pk=run_id).owner == owner
    assert ApiToken.objects.get().last_used_at is not None


@pytest.mark.parametrize("header", ["Bearer arl_nope", "Bearer ", "Basic abc"])
def test_an_unknown_token_is_a_401(header):
    r = Client().get("/api/runs", HTTP_AUTHORIZATION=header)
    assert r.status_code == 401 and r.json()["detail"]


def test_a_revoked_token_is_a_401(api, owner, token):
    row = ApiToken.objects.get()
    assert tokens.do_revoke_token(owner, row.pk)
    assert api.get("/api/runs").status_code == 401
    assert tokens.user_for_token(token) is None


def test_another_users_token_gets_404_for_my_run(api, other):
    run_id = new_run(api)
    theirs = TokenClient(tokens.do_create_token(other, "x")[1])
    assert theirs.post_events(run_id, steps(1)).status_code == 404
    assert (
        theirs.post_json(f"/api/runs/{run_id}/finish", {"status": "failed"}).status_code
        == 404
    )
    assert MetricPoint.objects.count() == 0


def create_on_page(client, name):
    """The tokens page's form as a browser sends it: the page first, then its form
    (with the one-use mark the page rendered)."""
    mark = client.get("/settings/tokens/").context["form_mark"]
    return client.post("/settings/tokens/", {"name": name, "form_mark": mark})


def test_the_tokens_page_creates_shows_once_and_revokes(owner_client, owner):
    r = create_on_page(owner_client, "notebook")
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"
    token = r.context["new_token"]["token"]
    assert token.encode() in r.content
    # The page that shows it once fills it into the lines to paste, with copy
    # buttons (a newcomer had to splice it into "<token>" by hand).
    shown = r.content.decode()
    assert (
        f'TRACKIO_SERVER_URL="http://testserver/trackio/?write_token={token}"' in shown
    )
    assert f"DASHBOARD_TOKEN={token} python -m trainer run" in shown
    assert shown.count("data-copy=") == 3 and "js/copy.js" in shown
    listing = owner_client.get("/settings/tokens/")
    assert token.encode() not in listing.content and b"notebook" in listing.content
    # How to report here, from trackio's trainers or the HTTP API, and its docs.
    page = listing.content.decode()
    assert (
        'TRACKIO_SERVER_URL="http://testserver/trackio/?write_token=&lt;token&gt;"'
        in page
    )
    assert 'href="/api/docs"' in page
    row = ApiToken.objects.get()
    owner_client.post(f"/settings/tokens/{row.pk}/revoke/")
    assert tokens.user_for_token(token) is None


def test_the_tokens_page_refuses_a_blank_name_next_to_the_field(owner_client):
    r = create_on_page(owner_client, "  ")
    assert b"name: must be a string" in r.content and ApiToken.objects.count() == 0


def test_a_reload_of_the_page_that_showed_a_new_token_creates_no_other(owner_client):
    """The newcomer's reload resent the form: a second live token of that name."""
    form = {
        "name": "second",
        "form_mark": owner_client.get("/settings/tokens/").context["form_mark"],
    }
    first = owner_client.post("/settings/tokens/", form)
    assert first.context["new_token"] and ApiToken.objects.count() == 1
    again = owner_client.post("/settings/tokens/", form)  # the browser's resend
    assert again.context["new_token"] is None and ApiToken.objects.count() == 1
    assert "this form was already sent" in again.content.decode()
    assert first.context["new_token"]["token"].encode() not in again.content
    # the form it renders then works, once
    fresh = {"name": "third", "form_mark": again.context["form_mark"]}
    assert owner_client.post("/settings/tokens/", fresh).context["new_token"]
    assert (
        owner_client.post("/settings/tokens/", {"name": "x"}).context["new_token"]
        is None
    )
    assert ApiToken.objects.count() == 2


# --- events -------------------------------------------------------------------------
def test_posted_events_are_stored_once_and_a_resend_counts_duplicates(
    api, published, commit
):
    run_id = new_run(api)
    batch = [{"type": "run_started", "config": {}, "start_step": 1}, *steps(1, 2)]
    with commit():
        r = api.post_events(run_id, batch)
    assert r.status_code == 200, r.content
    assert r.json() == {
        "accepted": len(batch),
        "duplicates": 0,
        "conflicts": 0,
        "conflicting": [],
        "cancel_requested": False,
    }
    points, trajs = MetricPoint.objects.count(), Trajectory.objects.count()
    assert trajs == 4 and points > 0
    r = api.post_events(run_id, steps(1, 2))
    assert r.json() == {
        "accepted": 0,
        "duplicates": len(batch) - 1,
        "conflicts": 0,
        "conflicting": [],
        "cancel_requested": False,
    }
    assert (MetricPoint.objects.count(), Trajectory.objects.count()) == (points, trajs)
    run = Run.objects.get(pk=run_id)
    assert run.last_step == 2 and run.status == RunStatus.RUNNING
    assert published and published[-1]["last_step"] == 2


def test_a_step_counts_as_a_duplicate_only_when_every_point_of_it_was_stored(api):
    run_id = new_run(api)
    first = [{"type": "step", "step": s, "metrics": {"a": 1.0}} for s in (1, 2)]
    assert api.post_events(run_id, first).json()["accepted"] == 2
    again = [
        {"type": "step", "step": 1, "metrics": {"a": 1.0}},  # all stored: duplicate
        {"type": "step", "step": 2, "metrics": {"a": 1.0, "b": 2.0}},  # b is new
        {"type": "step", "step": 3, "metrics": {"a": 3.0}},  # new
    ]
    r = api.post_events(run_id, again).json()
    assert (r["accepted"], r["duplicates"]) == (2, 1)
    assert MetricPoint.objects.filter(run_id=run_id).count() == 4


def test_metric_names_and_values_of_any_spelling_are_stored_exactly(api):
    """The points travel to PostgreSQL as array literals built by hand: quotes,
    backslashes, commas, braces, spaces, non-ASCII names and non-finite values."""
    names = ['a"b', "c\\d", "e,f", "{g}", "h i", "ключ/ünï", "NULL", "x}"]
    values = [1.5, -0.0, 1e-300, "NaN", "Infinity", "-Infinity", 7.0, 8.0]
    metrics = dict(zip(names, values, strict=True))
    r = api.post_events(
        run_id := new_run(api), [{"type": "step", "step": 1, "metrics": metrics}]
    )
    assert r.status_code == 200, r.content
    stored = dict(MetricPoint.objects.filter(run_id=run_id).values_list("key", "value"))
    assert set(stored) == set(names)
    for name, value in metrics.items():
        want = float(value)
        got = stored[name]
        assert (math.isnan(got) and math.isnan(want)) or got == want, name


def test_the_sqlite_path_finds_the_same_re_sent_steps(owner):
    """The embedded default (SQLite) finds re-sent steps with a query; called
    directly here on the test database."""
    from dashboard.ingest import writer

    run = Run.objects.create(owner=owner, name="r", config={}, external=True)
    writer.insert_metrics(run.pk, {(1, "a"): 1.0, (2, "a"): 2.0})
    points = {(1, "a"): 1.0, (2, "a"): 2.0, (2, "b"): 0.5, (3, "a"): 3.0}
    found = Outcome()
    writer._insert_metrics_py(run.pk, points, found)
    assert found.stale_steps == {1} and found.count == 0


def test_gzip_bodies_are_accepted(api):
    run_id = new_run(api)
    r = api.post_events(run_id, steps(1), gzip_it=True)
    assert r.status_code == 200 and r.json()["accepted"] == len(steps(1))


def test_a_bad_line_refuses_the_whole_batch_naming_line_and_field(api):
    run_id = new_run(api)
    batch = steps(1)
    batch.insert(2, {"type": "step", "step": 2, "metrics": {"reward": [1]}})
    r = api.post_events(run_id, batch)
    assert r.status_code == 400
    assert r.json()["errors"] == [
        "line 3: metrics.reward: Input should be a valid number"
    ]
    assert MetricPoint.objects.count() == 0 and Trajectory.objects.count() == 0


@pytest.mark.parametrize(
    "raw, expected",
    [
        (
            b'{"type": "step", "step": 1, "metrics": {}}\n{not json\n',
            "line 2: not JSON",
        ),
        (b'{"type": "rollout", "step": 1}\n', "line 1: type: must be one of"),
        (b"[1, 2]\n", "line 1: (line): an event must be a JSON object"),
        (
            b'{"type": "trajectory", "step": -1, "group": 0, "index": 0}',
            "line 1: step:",
        ),
        (b"\xff\xfe", "body: not UTF-8"),
    ],
)
def test_malformed_bodies_are_400s_that_say_why(api, raw, expected):
    run_id = new_run(api)
    r = api.post_events(run_id, None, raw=raw)
    assert r.status_code == 400 and r.json()["errors"][0].startswith(expected)


def test_bodies_over_the_limits_are_413_json(api, settings):
    run_id = new_run(api)
    settings.EVENTS_MAX_LINES = 2
    r = api.post_events(run_id, steps(1, 2))
    assert r.status_code == 413 and "lines" in r.json()["detail"]
    settings.EVENTS_MAX_LINES = 5000
    settings.EVENTS_MAX_BODY_BYTES = 1024
    r = api.post_events(run_id, steps(1, 2, 3))
    assert r.status_code == 413 and "send smaller batches" in r.json()["detail"]
    settings.EVENTS_MAX_BODY_BYTES = 1 << 20
    settings.EVENTS_MAX_DECODED_BYTES = 2048
    r = api.post_events(run_id, steps(1, 2, 3, 4, 5), gzip_it=True)
    assert r.status_code == 413 and "decompressed" in r.json()["detail"]
    assert MetricPoint.objects.count() == 0


def test_a_bad_gzip_body_is_a_400(api):
    run_id = new_run(api)
    r = api.post_events(
        run_id, None, raw=b"not gzip at all", HTTP_CONTENT_ENCODING="gzip"
    )
    assert r.status_code == 400 and "not valid gzip" in r.json()["detail"]


def test_events_for_a_run_of_our_workers_are_refused(api, owner, tiny_config, enqueued):
    from dashboard.runs import services

    native = services.launch_run(owner, tiny_config)
    r = api.post_events(native.pk, steps(1))
    assert r.status_code == 409 and MetricPoint.objects.count() == 0


def test_finish_and_a_run_finished_event_both_end_the_run(api):
    a, b = new_run(api), new_run(api)
    r = api.post_json(f"/api/runs/{a}/finish", {"status": "failed", "error": "OOM"})
    assert r.status_code == 200 and r.json()["status"] == "failed"
    assert Run.objects.get(pk=a).error == "OOM"
    api.post_events(b, [{"type": "run_finished", "status": "succeeded", "step": 1}])
    run = Run.objects.get(pk=b)
    assert run.status == "succeeded" and run.finished_at is not None
    bad = api.post_json(f"/api/runs/{a}/finish", {"status": "exploded"})
    assert bad.status_code == 400 and bad.json()["errors"][0].startswith("status:")


def test_a_silent_run_is_lost_and_its_next_event_revives_it(api, settings):
    run_id = new_run(api)
    later = timezone.now() + timedelta(seconds=settings.EXTERNAL_RUN_TIMEOUT + 1)
    assert external.mark_lost(now=timezone.now()) == []
    assert [str(i) for i in external.mark_lost(now=later)] == [run_id]
    assert Run.objects.get(pk=run_id).status == RunStatus.LOST
    api.post_events(run_id, steps(1))
    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_the_reaper_never_requeues_an_external_run(api, settings):
    from dashboard.runs import lease

    run_id = new_run(api)
    later = timezone.now() + timedelta(seconds=settings.RUN_LEASE_TIMEOUT_SECONDS + 5)
    assert lease.reap(now=later, enqueue=False) == []
    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING


def test_external_config_must_be_an_object_and_name_a_string(api):
    r = api.post_json("/api/runs/external", {"name": "x", "config": [1]})
    assert r.status_code == 400
    r = api.post_json("/api/runs/external", {"name": "", "config": {}})
    assert r.status_code == 400 and r.json()["errors"][0].startswith("name:")


def test_an_external_config_of_any_shape_renders_on_the_pages(api, owner_client):
    weird = {"algorithm": "grpo", "env": ["x"], "model": 5, "steps": "many"}
    run_id = new_run(api, config=weird)
    api.post_events(run_id, steps(1))
    assert owner_client.get(f"/runs/{run_id}/").status_code == 200
    assert owner_client.get("/runs/").status_code == 200
    assert owner_client.get("/").status_code == 200


def test_the_event_schema_is_served_without_login():
    r = Client().get("/api/events/schema.json")
    assert r.status_code == 200
    assert {m["$ref"].rsplit("/", 1)[-1] for m in r.json()["oneOf"]} >= {
        "StepEvent",
        "TrajectoryEvent",
    }


# --- detectors on the server ----------------------------------------------------------
def _entropy_steps(values):
    return [
        {"type": "step", "step": i + 1, "metrics": {"entropy": v, "reward": 0.5}}
        for i, v in enumerate(values)
    ]


def test_detectors_run_on_external_events_and_fire_once(api, published, commit):
    run_id = new_run(api)
    collapse = _entropy_steps([2.0] * 6 + [0.01] * 6)
    api.post_events(run_id, collapse[:6])
    assert Alert.objects.count() == 0
    with commit():
        api.post_events(run_id, collapse[6:])
    alerts = list(Alert.objects.filter(run_id=run_id))
    assert [a.detector for a in alerts] == ["entropy_collapse"]
    assert alerts[0].evidence["source"] == "server"
    assert any(f["alerts"] for f in published)
    api.post_events(run_id, collapse)  # a replay fires nothing new
    assert Alert.objects.filter(run_id=run_id).count() == 1


def test_our_own_trainer_streaming_keeps_its_own_alerts_only(api):
    run_id = new_run(api, framework="agentic-rl")
    api.post_events(run_id, _entropy_steps([2.0] * 6 + [0.01] * 6))
    assert Alert.objects.count() == 0


# --- every API error is JSON ------------------------------------------------------------
def test_an_oversized_json_body_is_a_json_413(owner_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    r = owner_client.post(
        "/api/runs",
        json.dumps({"config": {"name": "x" * 5000}}),
        content_type="application/json",
    )
    assert r.status_code == 413 and r["Content-Type"].startswith("application/json")


def test_an_unknown_api_path_is_a_json_404(owner_client):
    r = owner_client.get("/api/no/such/thing")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}


def test_compare_shows_a_native_and_an_external_run_side_by_side(
    api, owner_client, run
):
    external_id = new_run(api, config={"learning_rate": 1e-6, "beta": 0.04})
    api.post_events(external_id, steps(1, 2, 3))
    r = owner_client.get(f"/compare/?runs={run.pk},{external_id}")
    assert r.status_code == 200
    assert b"learning_rate" in r.content and b"trl run" in r.content


def test_an_external_run_page_charts_what_was_logged(api, owner_client):
    run_id = new_run(api)
    api.post_events(
        run_id,
        [
            {
                "type": "step",
                "step": 1,
                "metrics": {
                    "reward": 0.5,
                    "rewards/accuracy/mean": 0.4,
                    "critic/score/mean": 0.5,
                    "actor/pg_loss": 0.1,
                },
            }
        ],
    )
    charts = owner_client.get(f"/runs/{run_id}/").context["page_data"]["charts"]
    by_id = {c["id"]: c["keys"] for c in charts}
    assert by_id["components"] == ["rewards/accuracy/mean"]  # not our default reward's
    assert "critical" not in by_id and "dropped" not in by_id  # nothing will come
    extra = [k for cid, keys in by_id.items() if cid.startswith("extra-") for k in keys]
    assert sorted(extra) == ["actor/pg_loss", "critic/score/mean"]


def test_a_run_with_staleness_and_mismatch_metrics_gets_their_charts(api, owner_client):
    """prime-rl's names as the importer sends them: originals and ours."""
    run_id = new_run(api)
    metrics = {
        "reward": 0.5,
        "off_policy/mean": 1.5,
        "off_policy/staleness": 1.5,
        "mismatch_kl/all/mean": 0.01,
        "mismatch/kl": 0.01,
    }
    api.post_events(run_id, [{"type": "step", "step": 1, "metrics": metrics}])
    charts = owner_client.get(f"/runs/{run_id}/").context["page_data"]["charts"]
    by_id = {c["id"]: c for c in charts}
    assert by_id["staleness"]["keys"] == ["off_policy/mean", "off_policy/staleness"]
    assert by_id["staleness"]["title"] == "Staleness (policy versions behind)"
    assert by_id["mismatch"]["keys"] == ["mismatch/kl"]
    assert by_id["mismatch"]["title"] == "Train/inference mismatch"
    extra = [
        k for cid, c in by_id.items() if cid.startswith("extra-") for k in c["keys"]
    ]
    assert extra == ["mismatch_kl/all/mean"]  # shown once, not twice


def test_a_run_without_those_metrics_has_no_such_charts(api, owner_client):
    run_id = new_run(api)
    api.post_events(run_id, [{"type": "step", "step": 1, "metrics": {"reward": 1.0}}])
    charts = owner_client.get(f"/runs/{run_id}/").context["page_data"]["charts"]
    assert not {"staleness", "mismatch"} & {c["id"] for c in charts}


def test_a_native_run_charts_the_families_it_logged_and_no_others():
    from dashboard.pages.charts import run_charts

    native = {c["id"]: c["keys"] for c in run_charts({}, None, logged=["mismatch/kl"])}
    assert native["mismatch"] == ["mismatch/kl"] and "staleness" not in native
    assert "reward" in native  # the standard charts stay, as for every native run


# --- issue 21: honest event semantics -------------------------------------------------
def test_last_step_is_the_largest_step_seen_whatever_the_order(api):
    run_id = new_run(api)
    api.post_events(
        run_id, [{"type": "step", "step": s, "metrics": {"a": 1.0}} for s in (9, 7)]
    )
    assert Run.objects.get(pk=run_id).last_step == 9
    api.post_events(run_id, [{"type": "step", "step": 5, "metrics": {"a": 1.0}}])
    assert Run.objects.get(pk=run_id).last_step == 9


@pytest.mark.parametrize("trailing", ["\n", ""])
def test_the_line_limit_counts_lines_with_or_without_a_trailing_newline(
    api, settings, trailing
):
    run_id = new_run(api)
    settings.EVENTS_MAX_LINES = 3
    line = json.dumps({"type": "step", "step": 1, "metrics": {"a": 1.0}})
    r = api.post_events(run_id, None, raw=("\n".join([line] * 4) + trailing).encode())
    assert r.status_code == 413 and "lines" in r.json()["detail"]
    r = api.post_events(run_id, None, raw=("\n".join([line] * 3) + trailing).encode())
    assert r.status_code == 200, r.content


def test_a_second_finish_cannot_change_a_finished_runs_status(api):
    run_id = new_run(api)
    url = f"/api/runs/{run_id}/finish"
    assert api.post_json(url, {"status": "succeeded"}).status_code == 200
    again = api.post_json(url, {"status": "succeeded"})
    assert again.status_code == 200 and again.json()["status"] == "succeeded"
    flip = api.post_json(url, {"status": "failed", "error": "late"})
    assert flip.status_code == 409, flip.content
    run = Run.objects.get(pk=run_id)
    assert run.status == "succeeded" and not run.error


def test_an_external_run_with_no_learning_signal_gets_the_warning(
    api, published, owner_client
):
    # TRL's frac_reward_zero_std, all groups equal for 10 steps (issue 22.9)
    run_id = new_run(api)
    events = []
    for i in range(10):
        events.append(
            {"type": "step", "step": i + 1, "metrics": {"frac_reward_zero_std": 1.0}}
        )
        for index in range(2):  # one group of two equal rewards a step
            events.append(
                {"type": "trajectory", "step": i + 1, "group": 0, "index": index,
                 "reward": 0.0, "advantage": 0.0, "segments": []}
            )  # fmt: skip
    api.post_events(run_id, events)
    (alert,) = Alert.objects.filter(run_id=run_id)
    assert alert.detector == "no_learning_signal" and alert.severity == "warning"
    assert "identical rewards" in alert.message
    assert [(t["group"], t["index"]) for t in alert.trajectories] == [(0, 0), (0, 1)]
    # and the run page says it above the charts, with what to check
    html = owner_client.get(f"/runs/{run_id}/").content.decode()
    banner = html.split("data-no-signal", 1)[1].split("</div>", 1)[0]
    assert not banner.startswith(" hidden") and "identical rewards" in banner
