from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from dashboard.models import MetricPoint, Run

pytestmark = pytest.mark.django_db


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def test_launch_through_the_api_returns_the_run(
    owner_client, tiny_config, enqueued, commit
):
    with commit():
        r = post(owner_client, "/api/runs", {"config": tiny_config, "name": "first"})
    assert r.status_code == 201, r.content
    body = r.json()
    assert (
        body["name"] == "first"
        and body["status"] == "queued"
        and body["owner"] == "owner"
    )
    assert body["config"]["rollout"]["group_size"] == 2
    assert enqueued == [(body["id"], "cpu")]


def test_a_run_launched_without_any_name_is_named_from_its_config(
    owner_client, tiny_config, enqueued, commit
):
    tiny_config.pop("name", None)
    env, preset = "calc", "grpo"  # the schema's defaults
    with commit():
        first = post(owner_client, "/api/runs", {"config": tiny_config}).json()
        second = post(owner_client, "/api/runs", {"config": tiny_config}).json()
        named = post(
            owner_client, "/api/runs", {"config": {**tiny_config, "name": "x"}}
        )
    assert first["name"] == first["config"]["name"] == f"{env}-{preset}-1"
    assert second["name"] == f"{env}-{preset}-2"
    assert named.json()["name"] == "x"


def test_a_bad_config_is_a_400_naming_the_field_and_nothing_is_enqueued(
    owner_client, tiny_config, enqueued, commit
):
    tiny_config["optim"] = {"lr": 0}
    with commit():
        r = post(owner_client, "/api/runs", {"config": tiny_config})
    assert r.status_code == 400
    assert any(e.startswith("config.optim.lr:") for e in r.json()["errors"])
    assert enqueued == [] and Run.objects.count() == 0


@pytest.mark.parametrize(
    "body, field",
    [
        ({"config": []}, "config"),
        ({"config": {}, "extra": 1}, "extra"),
        ({"config": {}, "name": 5}, "name"),
        ({}, "config"),
    ],
)
def test_malformed_launch_bodies_are_400s_naming_the_field(
    owner_client, body, field, enqueued
):
    r = post(owner_client, "/api/runs", body)
    assert r.status_code == 400
    assert any(e.startswith(f"{field}:") for e in r.json()["errors"]), r.json()


def test_unparseable_json_is_a_400(owner_client, enqueued):
    r = owner_client.post("/api/runs", "{not json", content_type="application/json")
    assert r.status_code == 400
    deep = "[" * 100_000 + "]" * 100_000
    r = owner_client.post("/api/runs", deep, content_type="application/json")
    assert r.status_code == 400


def test_csrf_is_required_for_session_posts(owner, tiny_config, enqueued):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    r = post(client, "/api/runs", {"config": tiny_config})
    assert r.status_code == 403
    client.get("/accounts/login/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    r = client.post(
        "/api/runs",
        json.dumps({"config": tiny_config}),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert r.status_code == 201


def test_clone_and_cancel(owner_client, run, enqueued):
    r = post(owner_client, f"/api/runs/{run.id}/clone", {"overrides": {"steps": 9}})
    assert (
        r.status_code == 201
        and r.json()["parent"] == str(run.id)
        and r.json()["config"]["steps"] == 9
    )
    r = post(owner_client, f"/api/runs/{run.id}/clone", {"overrides": {"steps": -1}})
    assert r.status_code == 400 and r.json()["errors"][0].startswith("config.steps:")
    r = post(owner_client, f"/api/runs/{run.id}/cancel", {})
    assert r.status_code == 200 and r.json()["cancel_requested"] is True
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    r = post(owner_client, f"/api/runs/{run.id}/cancel", {})
    assert r.status_code == 409


def test_list_and_detail(owner_client, run):
    r = owner_client.get("/api/runs")
    assert (
        r.status_code == 200
        and r.json()["count"] == 1
        and r.json()["runs"][0]["id"] == str(run.id)
    )
    r = owner_client.get(f"/api/runs/{run.id}")
    assert r.json()["last_step"] == 6 and r.json()["config"]["seed"] == 3


def test_metrics_without_keys_lists_the_names(owner_client, run):
    r = owner_client.get(f"/api/runs/{run.id}/metrics")
    assert r.json()["keys"] == [
        "grad_norm",
        "kl",
        "policy_loss",
        "reward",
        "reward_std",
    ]


def test_metrics_are_downsampled_keeping_min_max_last_and_their_steps(
    owner_client, owner, tiny_config, enqueued
):
    from dashboard.runs import services

    run = services.launch_run(owner, tiny_config)
    values = {s: float((s * 37) % 101) for s in range(1, 1001)}
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, step=s, key="loss", value=v) for s, v in values.items()
    )
    r = owner_client.get(f"/api/runs/{run.id}/metrics", {"keys": "loss", "points": 100})
    body = r.json()
    assert body["bucket_width"] == 10
    s = body["series"]["loss"]
    assert len(s["step"]) == 100
    bucket = {st: values[st] for st in range(11, 21)}  # the second bucket
    assert (
        s["min"][1] == min(bucket.values()) and values[s["min_step"][1]] == s["min"][1]
    )
    assert (
        s["max"][1] == max(bucket.values()) and values[s["max_step"][1]] == s["max"][1]
    )
    assert (s["step"][1], s["last"][1]) == (20, values[20])
    r = owner_client.get(
        f"/api/runs/{run.id}/metrics",
        {"keys": "loss", "points": 100, "since_step": 990},
    )
    assert r.json()["series"]["loss"]["step"] == list(range(991, 1001))


def test_metrics_points_are_capped(owner_client, run):
    r = owner_client.get(
        f"/api/runs/{run.id}/metrics", {"keys": "reward", "points": 100_000}
    )
    assert r.status_code == 400 and r.json()["errors"][0].startswith("points:")


def test_non_finite_metrics_are_strings_in_json(owner_client, run):
    r = owner_client.get(f"/api/runs/{run.id}/metrics", {"keys": "kl,grad_norm"})
    body = json.loads(r.content)  # strict JSON: would fail on a bare NaN
    assert body["series"]["kl"]["last"][1] == "NaN"
    assert body["series"]["grad_norm"]["last"][3] == "Infinity"


def test_trajectories_judgements_alerts_paths_checkpoints(owner_client, run):
    base = f"/api/runs/{run.id}"
    trajs = owner_client.get(f"{base}/trajectories", {"step": 2}).json()["trajectories"]
    assert [(t["step"], t["index"]) for t in trajs] == [(2, 0), (2, 1)]
    detail = owner_client.get(f"{base}/trajectories/2/0/1").json()
    assert detail["segments"][1]["token_ids"] == [10, 11, 12, 13]
    assert detail["segments"][0]["logprob"] == ["NaN", "NaN", "NaN"]
    assert (
        detail["judgements"][0]["rationale"] == "<script>alert(1)</script>"
    )  # data, never markup
    assert detail["critical_path"] is None and detail["steps"][0]["tool"] == "answer"
    assert owner_client.get(f"{base}/trajectories/2/0/9").status_code == 404
    assert (
        len(
            owner_client.get(f"{base}/judgements", {"since_step": 4}).json()[
                "judgements"
            ]
        )
        == 4
    )
    assert [a["step"] for a in owner_client.get(f"{base}/alerts").json()["alerts"]] == [
        3,
        6,
    ]
    assert owner_client.get(f"{base}/alerts").json()["alerts"][0]["evidence"] == {
        "slope": "Infinity"
    }
    assert len(owner_client.get(f"{base}/critical-paths").json()["critical_paths"]) == 6
    assert [
        c["step"] for c in owner_client.get(f"{base}/checkpoints").json()["checkpoints"]
    ] == [6]


def test_backfill_returns_what_frames_carried_since_a_step(owner_client, run):
    body = owner_client.get(f"/api/runs/{run.id}/backfill", {"since_step": 4}).json()
    assert [s["step"] for s in body["steps"]] == [5, 6]
    assert body["steps"][0]["metrics"]["reward"] == pytest.approx(0.989358)
    assert {t["step"] for t in body["trajectories"]} == {5, 6}
    assert body["more"] is False and body["last_step"] == 6
    body = owner_client.get(
        f"/api/runs/{run.id}/backfill", {"since_step": 0, "max_steps": 2}
    ).json()
    assert [s["step"] for s in body["steps"]] == [1, 2] and body["more"] is True


def body_of(response) -> bytes:
    """A streamed response's bytes (the export streams an asynchronous iterator)."""
    from asgiref.sync import async_to_sync

    if not response.is_async:
        return b"".join(response.streaming_content)

    async def read():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)()


def test_export_is_json_lines_in_event_shapes(owner_client, run):
    r = owner_client.get(f"/api/runs/{run.id}/export")
    assert r["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in body_of(r).decode().splitlines()]
    kinds = [line["type"] for line in lines]
    assert (
        kinds[0] == "run"
        and kinds.count("step") == 6
        and kinds.count("trajectory") == 12
    )
    assert kinds.count("alert") == 2 and kinds.count("checkpoint") == 1
    step2 = next(line for line in lines if line["type"] == "step" and line["step"] == 2)
    assert step2["metrics"]["kl"] == "NaN"


def _export(client, run, **params):
    import gzip

    r = client.get(f"/api/runs/{run.id}/export", params, HTTP_ACCEPT_ENCODING="gzip")
    assert r.status_code == 200 and r["Content-Encoding"] == "gzip"
    assert r.is_async  # streamed as read, not buffered whole under ASGI
    body = gzip.decompress(body_of(r)).decode()
    return [json.loads(line) for line in body.splitlines()]


def test_export_streams_gzip_and_includes_only_the_parts_asked_for(owner_client, run):
    full = _export(owner_client, run)
    assert len(full) > 20 and full[0]["type"] == "run"
    plain = body_of(owner_client.get(f"/api/runs/{run.id}/export")).decode()
    assert full == [json.loads(line) for line in plain.splitlines()]  # same lines
    light = _export(owner_client, run, include="trajectories,alerts")
    assert {line["type"] for line in light} == {"run", "trajectory", "alert"}
    seg = next(x for x in light if x["type"] == "trajectory")["segments"][0]
    assert "text" in seg and "logprob" not in seg and "token_ids" not in seg
    with_arrays = _export(owner_client, run, include="trajectories,token_arrays")
    seg = next(x for x in with_arrays if x["type"] == "trajectory")["segments"][0]
    assert len(seg["logprob"]) == len(seg["token_ids"]) > 0


def test_export_names_an_unknown_part(owner_client, run):
    r = owner_client.get(f"/api/runs/{run.id}/export", {"include": "metrics,secrets"})
    assert r.status_code == 400 and r.json()["errors"][0].startswith("include:")


def test_openapi_schema_and_docs_need_a_login(owner_client):
    assert Client().get("/api/openapi.json").status_code == 401  # JSON, for scripts
    schema = owner_client.get("/api/openapi.json").json()
    assert "/api/runs/{run_id}/metrics" in schema["paths"]
    docs = owner_client.get("/api/docs")
    assert docs.status_code == 200
    # Swagger UI is served from our static files, nothing from another host. (Not a
    # search for "cdn": the page carries a random CSRF token that may contain it.)
    body = docs.content.decode()
    assert 'src="/static/ninja/swagger-ui-bundle.js"' in body
    assert not re.search(r'(?:src|href)="(?:https?:)?//', body), body


def test_config_schema_is_the_train_config(owner_client):
    schema = owner_client.get("/api/config/schema").json()
    assert schema["title"] == "TrainConfig" and "rollout" in schema["properties"]


def _expected(raw: dict[int, float], lo_excl: int, hi: int):
    """(min, min_step, max, max_step, last) over raw steps in (lo_excl, hi], with
    PostgreSQL's order: NaN above every number; min ties to the earlier step, max
    ties to the later one."""
    import math

    steps = sorted(s for s in raw if lo_excl < s <= hi)
    order = lambda s: (math.isnan(raw[s]), raw[s] if not math.isnan(raw[s]) else 0.0)  # noqa: E731
    mn = min(steps, key=lambda s: (order(s), s))
    mx = max(steps, key=lambda s: (order(s), s))
    return raw[mn], mn, raw[mx], mx, raw[steps[-1]]


def _same(a, b):
    import math

    a = float(a) if isinstance(a, str) else a
    return a == b or (math.isnan(a) and math.isnan(b))


# (since_step, points) over steps 0..4320: raw points ((-1, 2000), (4300, 100),
# (4317, 2)), the 16-step level ((-1, 100), (37, 100) with a leading cut row, and
# (1552, 100): since_step is a row's first step, which holds a NaN), the 64-step
# level ((-1, 50), (100, 40) cut) and the 256-step level ((-1, 3), (1000, 7) cut,
# (100, 1) and (-1, 1): one bucket for everything).
BUCKET_CASES = [
    (-1, 100),
    (-1, 1000),
    (-1, 2000),
    (37, 100),
    (1552, 100),
    (4300, 100),
    (4317, 2),
    (-1, 50),
    (100, 40),
    (-1, 3),
    (1000, 7),
    (100, 1),
    (-1, 1),
]


def _run_with_points(owner, tiny_config):
    """A run with keys a and b at steps 0..4320, written in several batches (the
    rollups merge across them) and then cut at 4321 by a resumed attempt (the rollups
    of every level rebuilt where the cut falls); returns it and the surviving values."""
    import math

    from dashboard.ingest import writer
    from dashboard.runs import services

    run = services.launch_run(owner, tiny_config)
    raw = {
        s: (math.nan if s % 97 == 0 else float((s * 7) % 13)) for s in range(0, 5000)
    }
    for lo in range(0, 5000, 700):
        writer.insert_metrics(
            run.id,
            {
                (s, k): raw[s]
                for s in range(lo, min(lo + 700, 5000))
                for k in ("a", "b")
            },
        )
    writer.supersede(run.id, 4321)
    return run, {s: v for s, v in raw.items() if s < 4321}


def _check_buckets(series, raw, since_step, points):
    """Buckets cover (since_step, 4320] in order, as many as asked (or one per step
    when there are fewer steps), each with the exact min, max and last of its steps."""
    steps = sum(1 for s in raw if s > since_step)
    assert len(series["step"]) == min(points, steps)
    prev = since_step
    for i, last_step in enumerate(series["step"]):
        mn, mn_step, mx, mx_step, last = _expected(raw, prev, last_step)
        assert _same(series["min"][i], mn) and series["min_step"][i] == mn_step, (
            i,
            last_step,
        )
        assert _same(series["max"][i], mx) and series["max_step"][i] == mx_step, (
            i,
            last_step,
        )
        assert _same(series["last"][i], last)
        prev = last_step
    assert prev == 4320


@pytest.mark.parametrize("since_step, points", BUCKET_CASES)
def test_every_bucket_holds_the_exact_min_max_and_last_of_its_steps(
    owner, tiny_config, enqueued, since_step, points
):
    """Whichever path the database takes (rollups of some level, raw points) against
    a brute-force answer, as the API serves it (JSON text)."""
    from dashboard.reads import metrics as queries

    run, raw = _run_with_points(owner, tiny_config)
    text = queries.downsample_metrics_json(
        run, ["a", "b"], since_step=since_step, points=points
    )
    out = json.loads(text)
    assert out == queries.downsample_metrics(
        run, ["a", "b"], since_step=since_step, points=points
    )
    steps = [s for s in raw if s > since_step]
    assert out["bucket_width"] >= -(-len(steps) // points)
    for key in ("a", "b"):
        _check_buckets(out["series"][key], raw, since_step, points)


@pytest.mark.parametrize("since_step, points", BUCKET_CASES)
def test_sqlite_bucketing_in_python_matches_the_brute_force_answer(
    owner, tiny_config, enqueued, since_step, points
):
    """The embedded default (SQLite) buckets in Python; tests run on PostgreSQL here,
    so its code is called directly, on the same data."""
    from dashboard.reads import metrics as queries

    run, raw = _run_with_points(owner, tiny_config)
    lo, hi = queries._bounds(run, ["a", "b"], since_step)
    rows = queries._bucket_rows_py(run, ["a", "b"], lo, hi, points)
    series = queries._series_py(rows)
    for key in ("a", "b"):
        _check_buckets(json.loads(series[key]), raw, since_step, points)


@pytest.mark.parametrize("since_step, points", BUCKET_CASES)
def test_rollup_rows_folded_in_python_match_the_brute_force_answer(
    owner, tiny_config, enqueued, since_step, points
):
    """SQLite's rollup path (rows folded in Python), called directly on either
    database: the same buckets as the brute-force answer."""
    from dashboard.reads import metrics as queries

    run, raw = _run_with_points(owner, tiny_config)
    lo, hi = queries._bounds(run, ["a", "b"], since_step)
    shift = queries._rollup_level(lo, hi, points, since_step)
    if shift is None:
        pytest.skip("this case reads the points themselves")
    rows, width = queries._rollup_rows_py(
        run, ["a", "b"], lo, hi, points, shift, since_step
    )
    assert width >= -(-(hi - lo + 1) // points)
    series = queries._series_py(rows)
    for key in ("a", "b"):
        _check_buckets(json.loads(series[key]), raw, since_step, points)


def test_rollups_folded_in_python_equal_the_databases(owner, tiny_config, enqueued):
    """The rows SQLite's ingest folds in Python are the rows PostgreSQL's SQL writes
    (on SQLite: the rows its own incremental folds left equal a fold of all points)."""
    import math

    from dashboard.ingest import writer
    from dashboard.models import ROLLUP_SHIFTS, MetricPoint, MetricRollup

    run, _ = _run_with_points(owner, tiny_config)
    fields = (
        "key",
        "shift",
        "bucket",
        "vmin",
        "smin",
        "vmax",
        "smax",
        "vlast",
        "slast",
    )

    def table():
        return sorted(MetricRollup.objects.filter(run=run).values_list(*fields))

    before = table()
    MetricRollup.objects.filter(run=run).delete()
    writer._fold_rollups_py(
        run.id, MetricPoint.objects.filter(run=run).values_list("key", "step", "value")
    )
    after = table()
    assert len(before) == len(after) > 0
    assert {r[1] for r in after} == set(ROLLUP_SHIFTS)
    for a, b in zip(before, after, strict=True):
        assert a[:3] == b[:3] and a[4] == b[4] and a[6] == b[6] and a[8] == b[8]
        for x, y in ((a[3], b[3]), (a[5], b[5]), (a[7], b[7])):
            nan_x = x is None or math.isnan(x)
            assert (nan_x and (y is None or math.isnan(y))) or x == y, (a, b)


def test_a_chart_reads_the_coarsest_rollup_level_with_a_row_per_point():
    from dashboard.reads.metrics import _rollup_level

    assert _rollup_level(1, 100_000, 1000, 0) == 6  # 1,563 rows of 64 steps
    assert _rollup_level(1, 100_000, 300, 0) == 8  # 391 rows of 256 steps
    assert _rollup_level(1, 100_000, 2000, 0) == 4  # 6,251 rows of 16 steps
    assert _rollup_level(1, 20_000, 2000, 0) is None  # 10 steps a point: the points
    # since_step cuts the first row, which then does not count: 1,562 rows of 64
    # are too few for 1,563 points.
    assert _rollup_level(1, 100_000, 1563, -1) == 6
    assert _rollup_level(101, 100_000, 1563, 100) == 4


def test_gae_advantage_without_gae_credit_is_a_400_naming_both_fields(
    owner_client, tiny_config, enqueued, commit
):
    # The rule lives in the schema (TrainConfig), not only in the form.
    tiny_config["algorithm"] = {"preset": "grpo", "advantage": "gae"}
    with commit():
        r = post(owner_client, "/api/runs", {"config": tiny_config})
    assert r.status_code == 400
    errors = r.json()["errors"]
    assert any(e.startswith("config.algorithm.advantage:") for e in errors), errors
    assert any(e.startswith("config.algorithm.credit:") for e in errors), errors
    assert enqueued == [] and Run.objects.count() == 0


def test_checkpoints_say_which_are_still_kept_on_disk(
    owner_client, run, settings, tmp_path
):
    # keep: 2 deleted step 2's directory; its row stays (it was written), not kept.
    from dashboard.models import Checkpoint
    from dashboard.runs.execution import checkpoint_dir

    settings.RUNS_DIR = tmp_path / "runs"

    for step in (2, 4):
        Checkpoint.objects.create(run=run, step=step, path=f"/elsewhere/step-{step}")
    for step in (4, 6):
        held = checkpoint_dir(run.pk) / f"step-{step:06d}"
        held.mkdir(parents=True)
        (held / "policy.safetensors").write_bytes(b"x")
    got = owner_client.get(f"/api/runs/{run.id}/checkpoints").json()["checkpoints"]
    assert [(c["step"], c["kept"]) for c in got] == [(2, False), (4, True), (6, True)]


def test_the_run_list_carries_each_runs_latest_reward(owner, owner_client):
    """A newcomer's script listing runs had to fetch each run's metrics for it."""
    ours = Run.objects.create(owner=owner, name="ours", config={})
    trl = Run.objects.create(owner=owner, name="trl", config={}, external=True)
    odd = Run.objects.create(owner=owner, name="odd", config={})
    Run.objects.create(owner=owner, name="none yet", config={})
    for run, key, values in (
        (ours, "reward", [0.25, 0.5]),
        (trl, "train/reward", [1.5, 2.0]),  # TRL's name for it
        (odd, "reward", [0.1, float("nan")]),
    ):
        for step, v in enumerate(values, 1):
            MetricPoint.objects.create(run=run, step=step, key=key, value=v)
    got = {
        r["name"]: r["last_reward"]
        for r in owner_client.get("/api/runs").json()["runs"]
    }
    assert got == {"ours": 0.5, "trl": 2.0, "odd": "NaN", "none yet": None}
