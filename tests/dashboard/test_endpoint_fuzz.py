"""Hypothesis over every endpoint (issue 21.5): each URL the site routes (pages, the
JSON API, trackio's API; the admin and Django's own account views aside), reached with
hostile path values, query strings and bodies, by its owner, another user, a token
client and an anonymous one, never answers a 5xx; an API refusal is JSON. Each route is fuzzed on its own, with
the parameters it reads, so a rare route is reached as often as a common one.

The routes are read from the URL resolver when the test runs, so an endpoint added
later is fuzzed without touching this file. Path values are the fixtures' own ids
(so the views behind the ownership checks are reached) mixed with ids of nobody,
numbers past 64 bits and text with NUL, lone surrogates and bytes that are not UTF-8;
query parameter names are every name the OpenAPI document declares plus those the
pages read. Runs are never executed (``enqueued``); every example is rolled back with
the test's transaction."""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import quote

import pytest
from dashtest import client_for, populate
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_api_fuzz import json_values

from dashboard.runs import external
from dashboard.site import tokens

pytestmark = pytest.mark.django_db

SKIPPED = ("admin/", "accounts/")  # Django's own views, not ours
CONVERTER = re.compile(r"<(?:(?P<kind>\w+):)?(?P<name>\w+)>")

# What each page reads from its query string (the API's come from its schema); a
# route not listed here gets all of them.
TRAJECTORY_PARAMS = ["step", "sort", "from", "group", "index", "sign", "dropped"]
TRAJECTORY_PARAMS += ["reward_min", "reward_max", "length_min", "length_max"]
PAGE_PARAMS = {
    "": ["q", "group", "algorithm", "env", "status", "sort", "page"],
    "runs/": ["q", "group", "algorithm", "env", "status", "sort", "page"],
    "runs/new/": ["env", "preset", "dataset"],
    "runs/<uuid:run_id>/trajectories/": TRAJECTORY_PARAMS,
    "runs/<uuid:run_id>/trajectories/<int:step>/<int:group>/<int:index>/": ["from"],
    "runs/<uuid:run_id>/tasks/<path:task_id>/": ["task", "step"],
    "compare/": ["runs", "task"],
    "compare/task/": ["runs", "task"],
    "trackio/api/<str:name>": ["write_token"],
}
# Raw (already percent-encoded) values: NUL, a UTF-8-encoded surrogate, bytes that
# are no UTF-8 at all, numbers past 64 bits and past a float, negative and empty.
RAW_VALUES = [
    "%00", "%ED%A0%80", "%FF%FE", "9223372036854775808", "-9223372036854775809",
    "9" * 400, "1e999", "-1", "0", "", "NaN", "inf", "%2E%2E%2F", "a%00b",
]  # fmt: skip
SEGMENTS = [
    "0", "1", "-1", "9223372036854775808", "9" * 60, "%00", "%ED%A0%80", "%FF",
    "nope", "..", "%2F", "a%20b",
]  # fmt: skip


def routes() -> list[tuple[str, list[tuple[str, str]]]]:
    """(route, [(converter kind, parameter name), ...]) for every routed URL."""
    from django.urls import URLResolver, get_resolver

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            else:
                yield prefix + str(p.pattern)

    found = sorted(
        {r for r in walk(get_resolver().url_patterns) if not r.startswith(SKIPPED)}
    )
    return [
        (r, [(m["kind"] or "str", m["name"]) for m in CONVERTER.finditer(r)])
        for r in found
    ]


def api_params() -> dict[str, list[str]]:
    """Route (as the resolver spells it) -> the query parameters its schema declares."""
    from dashboard.api import api

    out: dict[str, list[str]] = {}
    for path, item in api.get_openapi_schema()["paths"].items():
        route = re.sub(r"\{(\w+)\}", r"<\1>", path).lstrip("/")
        out[route] = sorted(
            {
                p["name"]
                for op in item.values()
                for p in op.get("parameters", [])
                if p.get("in") == "query"
            }
        )
    return out


ROUTES = routes()
ROUTE_PARAMS = {**PAGE_PARAMS, **api_params()}
EVERY_PARAM = sorted({n for names in ROUTE_PARAMS.values() for n in names})
FUZZ = settings(
    max_examples=40,  # per route: about 2,000 requests in all
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def world(owner, other, tiny_config, enqueued, published):
    """Ids worth aiming at: the owner's run (with steps), an external run, another
    user's run, the owner's token and dataset-less ids of nobody."""
    from dashboard.models import Run
    from dashboard.runs import services

    own = services.launch_run(owner, tiny_config)
    Run.objects.filter(pk=own.pk).update(status="running")
    populate(own, range(1, 4))
    ext = external.do_create_external_run(owner, name="fuzz", framework="trl")
    theirs = services.launch_run(other, tiny_config)
    token_row, token = tokens.do_create_token(owner, "fuzz")
    return {
        "runs": [str(own.pk), str(ext.pk), str(theirs.pk), str(uuid.uuid4())],
        "ints": [str(token_row.pk), "1", "2", "3"],
        "token": token,
    }


def _segment(draw, kind: str, world: dict) -> str:
    if kind == "uuid" or (kind == "str" and draw(st.booleans())):
        return draw(st.sampled_from(world["runs"] + SEGMENTS))
    if kind == "int":
        return draw(st.sampled_from(world["ints"] + SEGMENTS))
    return quote(draw(st.text(max_size=8)), safe="") or "x"


@st.composite
def requests_for(draw, world: dict, route: str, converters: list[tuple[str, str]]):
    path = route
    for kind, name in converters:
        value = _segment(draw, kind, world)
        path = path.replace(f"<{kind}:{name}>", value).replace(f"<{name}>", value)
    own = ROUTE_PARAMS.get(route) or EVERY_PARAM
    names = draw(st.lists(st.sampled_from(own), max_size=len(own)))
    names += draw(st.lists(st.sampled_from(EVERY_PARAM), max_size=1))
    values = st.one_of(st.sampled_from(RAW_VALUES), st.sampled_from(world["runs"]))
    query = "&".join(f"{n}={draw(values)}" for n in names)
    method = draw(st.sampled_from(["GET", "GET", "POST"]))
    body = draw(
        st.one_of(
            json_values.map(lambda v: json.dumps(v, ensure_ascii=True)),
            st.sampled_from(["", "{", "\x00", "a=%00&b=1", "9" * 5000]),
        )
    )
    who = draw(st.sampled_from(["owner", "other", "token", "anonymous"]))
    return method, f"/{path}" + (f"?{query}" if query else ""), body, who


def _client(who: str, owner, other, token: str):
    from django.test import Client

    if who == "owner":
        return client_for(owner)
    if who == "other":
        return client_for(other)
    if who == "token":
        return Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    return Client()


def test_every_route_is_fuzzed():
    """The resolver walk finds the site's endpoints (a broken walk would fuzz none)."""
    found = {r for r, _ in ROUTES}
    for route in ("runs/<uuid:run_id>/", "api/runs/<run_id>/events", "healthz"):
        assert route in found
    assert "trackio/api/<str:name>" in found
    assert "offset" in ROUTE_PARAMS["api/runs/<run_id>/trajectories"]


@pytest.mark.parametrize(("route", "converters"), ROUTES, ids=[r for r, _ in ROUTES])
@FUZZ
@given(data=st.data())
def test_no_request_to_any_endpoint_is_a_5xx(
    world, owner, other, settings, data, route, converters
):
    settings.RUN_MAX_ACTIVE_PER_USER = 10**6
    method, url, body, who = data.draw(requests_for(world, route, converters))
    client = _client(who, owner, other, world["token"])
    if method == "GET":
        r = client.get(url)
    else:
        kind = "application/json" if body[:1] in '{["0123456789tfn' else "text/plain"
        r = client.post(url, body, content_type=kind)
    event(f"{r.status_code}")  # --hypothesis-show-statistics: what was reached
    assert r.status_code < 500, (method, url, who, r.content[:400])
    if url.startswith("/api/") and r.status_code >= 400:
        assert r["Content-Type"].startswith("application/json"), (url, r.content[:200])
