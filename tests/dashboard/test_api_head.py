"""``HEAD`` on the JSON API answers as ``GET`` does, without the body (``curl -I``):
django-ninja routes by method and has no HEAD, so it was a 405 on every endpoint."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.site import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def curl(owner):
    token = tokens.do_create_token(owner, "curl")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.parametrize(
    "url", ["/api/runs", "/api/runs/{id}", "/api/runs/{id}/metrics?keys=reward"]
)
def test_head_answers_as_get_without_the_body(curl, run, url):
    url = url.format(id=run.pk)
    got, head = curl.get(url), curl.head(url)
    assert got.status_code == head.status_code == 200
    assert head.content == b""
    assert head["Content-Type"] == got["Content-Type"]
    assert int(head["Content-Length"]) == len(got.content) > 0


def test_head_is_refused_as_get_is(curl, other, run):
    anonymous = Client().head("/api/runs")
    assert anonymous.status_code == 401 and anonymous.content == b""
    theirs = Client(
        HTTP_AUTHORIZATION=f"Bearer {tokens.do_create_token(other, 't')[1]}"
    )
    assert theirs.head(f"/api/runs/{run.pk}").status_code == 404
    assert curl.head("/api/runs?limt=5").status_code == 400  # an unknown parameter
    post_only = curl.head(f"/api/runs/{run.pk}/cancel")
    assert post_only.status_code == 405 and "POST" in post_only["Allow"]


def test_the_openapi_document_has_no_head_twins(curl):
    paths = curl.get("/api/openapi.json").json()["paths"]
    assert not any("head" in ops for ops in paths.values())
    assert "get" in paths["/api/runs"]
