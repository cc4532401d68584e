"""Hypothesis: whatever JSON reaches the run-submit body (POST /api/runs) or an
external run's events (POST /api/runs/{id}/events), the answer is never a 5xx, and
every refusal is the API's JSON ``errors``. Bodies mix random JSON (nested, strings
with NUL and lone surrogates, integers past 64 bits and past a float, wrong types)
with valid configs and events mutated at a random place, so both the first checks and
the layers behind them are reached. Runs are never executed (``enqueued``); every
example is rolled back with the test's transaction."""

from __future__ import annotations

import copy
import json

import pytest
from fake_runner import events_for_step
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dashboard.runs import external

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SPECIAL_TEXT = ["", "\x00", "a\x00b", "\ud800", "x\udfffy", "\ufffd", "é", " " * 3]
SPECIAL_INTS = [2**31, 2**63, -(2**63) - 1, 10**400, -(10**400), 2**53 + 1]
SPECIAL_FLOATS = [1e308, -1e308, 5e-324, float("nan"), float("inf"), -float("inf")]

texts = st.one_of(
    st.sampled_from(SPECIAL_TEXT),
    st.text(max_size=12),
    st.lists(st.sampled_from(SPECIAL_TEXT + ["ab", "Z"]), max_size=4).map("".join),
)
numbers = st.one_of(
    st.integers(),
    st.sampled_from(SPECIAL_INTS),
    st.floats(),
    st.sampled_from(SPECIAL_FLOATS),
    st.booleans(),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(SPECIAL_INTS),
    st.floats(),
    st.sampled_from(SPECIAL_FLOATS),
    texts,
)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(texts, inner, max_size=4),
    ),
    max_leaves=12,
)

CONFIG = {
    "name": "fuzz",
    "seed": 1,
    "steps": 5,
    "model": {"size": "tiny", "device": "cpu"},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    "algorithm": {"preset": "grpo"},
    "checkpoint": {"every": 2},
    "reward": {
        "components": [{"name": "outcome", "weight": 1.0}],
        "judges": [
            {"name": "j", "backend": "rubric", "rubric": [{"name": "answer_given"}]}
        ],
    },
}
EXTRA_EVENTS = [
    {"type": "run_started", "config": {"lr": 0.1}, "start_step": 1},
    {"type": "alert", "step": 1, "detector": "d", "message": "m", "evidence": {}},
    {"type": "checkpoint", "step": 1, "path": "/x"},
    {"type": "run_finished", "status": "failed", "step": 1, "error": "boom"},
]
EVENTS = [*events_for_step(3, 1), *EXTRA_EVENTS]


def _paths(value, prefix=()):
    """Every place in a JSON value (the value itself first)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


@st.composite
def mutated(draw, template):
    """``template`` with one to three places replaced, dropped or added to."""
    value = copy.deepcopy(template)
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(value))
        path = draw(st.sampled_from(paths[1:] or paths))
        if not path:
            return draw(json_values)
        parent = value
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["same-kind"] * 3 + ["replace", "drop", "add"]))
        old = parent[path[-1]]
        if action == "same-kind" and isinstance(old, str):
            parent[path[-1]] = draw(texts)
        elif action == "same-kind" and isinstance(old, (int, float)):
            parent[path[-1]] = draw(numbers)
        elif action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(texts)] = draw(json_values)
        else:
            parent[path[-1]] = draw(json_values)
    return value


def _dumps(value) -> str:
    # ensure_ascii escapes lone surrogates (\ud800), as a real client would send them.
    return json.dumps(value, ensure_ascii=True)


def _with_texts(name: str, description: str, run_name: str) -> str:
    """A valid config whose free-text fields hold ``texts`` (reaches the insert)."""
    config = copy.deepcopy(CONFIG)
    config["name"] = name
    config["reward"]["judges"][0]["rubric"][0]["description"] = description
    return _dumps({"config": config, "name": run_name})


launch_bodies = st.one_of(
    st.builds(_with_texts, texts, texts, texts),
    json_values.map(_dumps),
    st.fixed_dictionaries(
        {"config": st.one_of(mutated(CONFIG), json_values)},
        optional={"name": st.one_of(texts, json_values)},
    ).map(_dumps),
    st.builds(lambda c: _dumps({"config": c}), mutated(CONFIG)),
    st.sampled_from(['{"config": ' + "9" * 5000 + "}", "{", "\x00", ""]),
)
event_lines = st.one_of(
    json_values.map(_dumps),
    st.sampled_from(EVENTS).flatmap(mutated).map(_dumps),
    st.sampled_from(EVENTS).map(_dumps),
    st.sampled_from(['{"type": "step", "step": 1, "metrics": {"a": 1e999}}']),
    st.sampled_from(
        ['{"type": "step", "step": 1, "metrics": {"a": %s}}' % ("9" * 5000)]
    ),
)
event_bodies = st.lists(event_lines, min_size=1, max_size=3).map("\n".join)


def assert_not_5xx(r) -> None:
    event(f"status {r.status_code}")  # --hypothesis-show-statistics: what was reached
    assert r.status_code < 500, r.content[:500]
    if r.status_code >= 400:
        assert r["Content-Type"].startswith("application/json"), r.content[:200]
        assert isinstance(r.json()["detail"], str)


@FUZZ
@given(body=launch_bodies)
def test_no_run_submit_body_is_a_5xx(owner_client, enqueued, settings, body):
    settings.RUN_MAX_ACTIVE_PER_USER = 10**6  # every valid body reaches the insert
    r = owner_client.post("/api/runs", body, content_type="application/json")
    assert_not_5xx(r)


@pytest.fixture
def ext_run(owner):
    return external.do_create_external_run(owner, name="fuzz", framework="trl")


@FUZZ
@given(body=event_bodies)
def test_no_events_body_is_a_5xx(owner_client, ext_run, published, body):
    r = owner_client.post(
        f"/api/runs/{ext_run.pk}/events", body, content_type="application/x-ndjson"
    )
    assert_not_5xx(r)


@pytest.mark.parametrize(
    "body,why",
    [
        (b"hello", "Expecting value"),
        (b"[" * 10_000 + b"]" * 10_000, "recursion"),
        (b'{"name": "\xff"}', "utf-8"),
        (b'{"steps": ' + b"9" * 5000 + b"}", "digits"),
    ],
)
def test_a_body_that_does_not_parse_is_a_400_naming_the_body(owner_client, body, why):
    # "Cannot parse request body", naming no field, before.
    r = owner_client.post("/api/runs", body, content_type="application/json")
    assert r.status_code == 400
    answer = r.json()
    assert answer["errors"] == [answer["detail"]]
    assert answer["detail"].startswith("body: not a JSON object this API reads (")
    assert why.lower() in answer["detail"].lower()
