"""Hypothesis: bad configs through the launch API are 400s naming the field, never
500s, and nothing is created or enqueued."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.models import Run

pytestmark = pytest.mark.django_db

BASE = {
    "name": "fuzz",
    "seed": 1,
    "steps": 5,
    "model": {"size": "tiny", "device": "cpu"},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    "algorithm": {"preset": "grpo"},
    "optim": {"lr": 0.001},
    "checkpoint": {"every": 2},
}
NUMBER_FIELDS = [
    ("seed",),
    ("steps",),
    ("rollout", "tasks_per_step"),
    ("rollout", "group_size"),
    ("rollout", "max_turns"),
    ("rollout", "temperature"),
    ("rollout", "top_p"),
    ("optim", "lr"),
    ("optim", "beta1"),
    ("optim", "grad_clip"),
    ("optim", "epochs"),
    ("algorithm", "kl_beta"),
    ("algorithm", "entropy_coef"),
    ("algorithm", "eps"),
    ("checkpoint", "every"),
    ("model", "warmstart_steps"),
]
OPTIONAL_NUMBER_FIELDS = [("algorithm", "clip_low"), ("algorithm", "clip_high")]
ENUM_FIELDS = [
    ("algorithm", "preset"),
    ("model", "size"),
    ("model", "device"),
    ("env", "name"),
    ("algorithm", "agg"),
    ("rollout",),
]
SECTIONS = [(), ("rollout",), ("optim",), ("algorithm",), ("model",), ("checkpoint",)]

bad_numbers = st.sampled_from(
    [math.nan, math.inf, -math.inf, 1e300, -1e300, 10**12, -(10**12), 10**40]
)
wrong_types = st.one_of(
    st.text(alphabet="abcxyz", min_size=1, max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(
        st.text(alphabet="ab", min_size=1, max_size=3), st.integers(), max_size=2
    ),
)


def _set(config, path, value):
    node = config
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


@st.composite
def bad_configs(draw):
    """(body, field the error must name)."""
    config = copy.deepcopy(BASE)
    kind = draw(
        st.sampled_from(
            ["number", "type", "optional", "enum", "unknown", "deep", "string", "body"]
        )
    )
    if kind == "number":
        path = draw(st.sampled_from(NUMBER_FIELDS))
        _set(config, path, draw(bad_numbers))
    elif kind == "type":
        path = draw(st.sampled_from(NUMBER_FIELDS))
        _set(config, path, draw(st.one_of(wrong_types, st.none())))
    elif kind == "optional":
        path = draw(st.sampled_from(OPTIONAL_NUMBER_FIELDS))
        _set(config, path, draw(st.one_of(bad_numbers, wrong_types)))
    elif kind == "enum":
        path = draw(st.sampled_from(ENUM_FIELDS))
        if path == ("rollout",):  # a section that is not an object
            _set(config, path, draw(st.one_of(st.integers(), st.text(max_size=5))))
        else:
            _set(
                config,
                path,
                draw(
                    st.text(min_size=1, max_size=20).filter(
                        lambda s: s not in {"grpo", "tiny", "cpu", "calc"}
                    )
                ),
            )
    elif kind == "unknown":
        section = draw(st.sampled_from(SECTIONS))
        key = draw(st.text(alphabet="qwertyuiop_", min_size=3, max_size=30))
        path = (*section, key)
        _set(config, path, draw(st.integers()))
    elif kind == "deep":
        depth = draw(st.integers(30, 300))
        nested: dict = {}
        for _ in range(depth):
            nested = {"x": nested}
        path = ("env", "params")
        _set(config, path, nested)
    elif kind == "string":
        path = ("name",)
        _set(config, path, "n" * draw(st.integers(201, 200_000)))
    else:
        return {
            "config": draw(
                st.one_of(
                    st.integers(),
                    st.text(max_size=5),
                    st.lists(st.integers(), max_size=2),
                )
            )
        }, "config"
    if path == ("env", "name"):  # env is a union tagged by name: the error names "env"
        path = ("env",)
    return {"config": config}, "config." + ".".join(path)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=bad_configs())
def test_bad_configs_are_400s_naming_the_field(owner_client, enqueued, commit, case):
    body, field = case
    with commit():
        r = owner_client.post(
            "/api/runs", json.dumps(body), content_type="application/json"
        )
    assert r.status_code == 400, (field, r.status_code, r.content[:300])
    errors = r.json()["errors"]
    assert any(e.startswith(field) for e in errors), (field, errors)
    assert enqueued == [] and not Run.objects.exists()


def test_the_base_config_is_valid(owner_client, enqueued):
    r = owner_client.post(
        "/api/runs", json.dumps({"config": BASE}), content_type="application/json"
    )
    assert r.status_code == 201, r.content
