"""The API as a curl user meets it (issue 22.12): the OpenAPI document answers the
token they call the API with, an anonymous script gets a JSON 401 (a browser the login
page), a 405 is JSON, and an unknown query parameter is a 400 naming it instead of
being ignored."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.site import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def curl(owner):
    token = tokens.do_create_token(owner, "curl")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_openapi_document_answers_a_token_client(curl):
    r = curl.get("/api/openapi.json")
    assert r.status_code == 200
    assert "/api/runs/{run_id}/metrics" in r.json()["paths"]


def test_an_anonymous_script_gets_a_json_401_and_a_browser_the_login_page():
    r = Client().get("/api/openapi.json")
    assert r.status_code == 401 and r.json()["detail"] == "authentication required"
    bad = Client(HTTP_AUTHORIZATION="Bearer arl_nope").get("/api/docs")
    assert bad.status_code == 401
    page = Client().get("/api/docs")
    assert page.status_code == 302 and "/accounts/login/" in page["Location"]


def test_a_405_is_json(curl):
    r = curl.delete("/api/runs")
    assert r.status_code == 405 and r["Content-Type"].startswith("application/json")
    assert r.json()["errors"][0].startswith("method: DELETE")


def test_an_unknown_query_parameter_is_a_400_naming_it(curl, run):
    r = curl.get(f"/api/runs/{run.pk}/metrics?keys=reward&sinse_step=3")
    assert r.status_code == 400
    assert r.json()["detail"].startswith("sinse_step: unknown query parameter")
    assert "since_step" in r.json()["detail"]  # what it takes, to fix the typo
    ok = curl.get(f"/api/runs/{run.pk}/metrics?keys=reward&since_step=3")
    assert ok.status_code == 200


def test_every_query_parameter_the_pages_send_is_declared(curl, run):
    # The run page's charts, live backfill and compare call these.
    for url in (
        f"/api/runs/{run.pk}/metrics?keys=reward&points=500&since_step=0",
        f"/api/runs/{run.pk}/backfill?since_step=0&max_steps=2000",
        "/api/runs?offset=0&limit=5",
    ):
        assert curl.get(url).status_code == 200, url
