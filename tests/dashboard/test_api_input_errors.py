"""Input that once answered 500 (issue 21, items 5 and 10): each is a 400 naming the
field (the API's ``{"errors": ["field: message"]}``, the form's error, a 400 page),
and nothing is created or enqueued."""

from __future__ import annotations

import copy
import json

import pytest
from django.test import Client

from dashboard.library import model_dirs
from dashboard.models import Run
from dashboard.runs import external

pytestmark = pytest.mark.django_db

HUGE = "1" + "0" * 400  # a 401-digit JSON integer
JUDGE = {
    "name": "j",
    "backend": "openai",
    "endpoint": "local",
    "model": "m",
    "rubric": [{"name": "correct", "description": "right answer"}],
}


def post_json(client, url, body: dict | str):
    text = body if isinstance(body, str) else json.dumps(body)
    return client.post(url, text, content_type="application/json")


def errors_of(r) -> list[str]:
    assert r["Content-Type"].startswith("application/json"), r.content[:200]
    return r.json()["errors"]


def assert_400_naming(r, field: str) -> None:
    assert r.status_code == 400, r.content[:300]
    errors = errors_of(r)
    assert any(e.startswith(f"{field}: ") for e in errors), errors


@pytest.fixture
def judge_endpoint():
    from dashboard.models import JudgeEndpoint

    return JudgeEndpoint.objects.create(
        name="local", base_url="http://127.0.0.1:9/v1", enabled=True
    )


@pytest.fixture
def ext_run(owner):
    return external.do_create_external_run(owner, name="ext", framework="trl")


# --- text the database cannot store: NUL, lone surrogates ---------------------------
@pytest.mark.parametrize(
    "path, field",
    [
        (("name",), "config.name"),
        (("reward", "judges", 0, "rubric", 0, "description"), None),
        (("reward", "judges", 0, "model"), "config.reward.judges.0.model"),
    ],
)
@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"])
def test_unstorable_text_in_a_config_is_a_400_naming_it(
    owner_client, tiny_config, enqueued, judge_endpoint, path, field, bad
):
    config = copy.deepcopy(tiny_config)
    from dashboard.pages.forms import default_reward

    config["reward"] = {**default_reward("calc"), "judges": [copy.deepcopy(JUDGE)]}
    node = config
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = bad
    field = field or "config." + ".".join(str(p) for p in path)
    r = post_json(owner_client, "/api/runs", {"config": config})
    assert_400_naming(r, field)
    assert not Run.objects.exists() and enqueued == []


def test_a_nul_in_the_forms_run_name_is_the_name_fields_error(owner_client, enqueued):
    from tests.dashboard.test_pages_form import body, post_for

    r = owner_client.post("/runs/new/", body(post_for(name="a\x00b")))
    assert r.status_code == 400
    assert 'data-errors-for="name"><li>' in r.content.decode()
    assert not Run.objects.exists() and enqueued == []


def test_a_lone_surrogate_in_a_run_name_is_a_400(owner_client, tiny_config, enqueued):
    body = json.dumps({"config": tiny_config, "name": "x"}).replace('"x"', '"\\ud800"')
    assert_400_naming(post_json(owner_client, "/api/runs", body), "name")
    assert not Run.objects.exists()


@pytest.mark.parametrize("field", ["name", "framework"])
def test_a_lone_surrogate_in_an_external_runs_name_or_framework_is_a_400(
    owner_client, field
):
    body = json.dumps({"name": "ext", field: "\ufffe"}).replace("\\ufffe", "\\ud800")
    assert_400_naming(post_json(owner_client, "/api/runs/external", body), field)
    assert not Run.objects.exists()


def test_a_lone_surrogate_in_a_finish_error_is_a_400(owner_client, ext_run):
    body = '{"status": "failed", "error": "boom \\ud800"}'
    r = post_json(owner_client, f"/api/runs/{ext_run.pk}/finish", body)
    assert_400_naming(r, "error")
    ext_run.refresh_from_db()
    assert ext_run.status == "running"


@pytest.mark.parametrize("param", ["q", "algorithm", "env"])
def test_a_nul_in_a_runs_list_filter_is_a_400_page(owner_client, run, param):
    r = owner_client.get(f"/runs/?{param}=%00")
    assert r.status_code == 400
    assert f"{param}: " in r.content.decode()


# --- numbers out of range -----------------------------------------------------------
def _events(run_id, client, line: str):
    return client.post(
        f"/api/runs/{run_id}/events", line, content_type="application/x-ndjson"
    )


@pytest.mark.parametrize(
    "event, field",
    [
        ('{"type": "step", "step": 1, "metrics": {"loss": %s}}', "metrics.loss"),
        (
            '{"type": "trajectory", "step": 1, "group": 0, "index": 0, "reward": %s}',
            "reward",
        ),
        (
            '{"type": "trajectory", "step": 1, "group": 0, "index": 0, '
            '"advantage": %s}',
            "advantage",
        ),
        (
            '{"type": "trajectory", "step": 1, "group": 0, "index": 0, "segments": '
            '[{"kind": "model", "text": "a", "logprob": [%s]}]}',
            "segments.0.logprob.0",
        ),
        (
            '{"type": "judgement", "step": 1, "group": 0, "index": 0, "judge": "j", '
            '"scores": {"ok": %s}}',
            "scores.ok",
        ),
    ],
)
def test_a_huge_integer_in_an_event_is_a_400_naming_the_field(
    owner_client, ext_run, event, field
):
    r = _events(ext_run.pk, owner_client, event % HUGE)
    assert r.status_code == 400, r.content[:300]
    assert errors_of(r)[0].startswith(f"line 1: {field}: "), errors_of(r)


def test_an_integer_past_pythons_digit_limit_in_an_event_is_a_400(
    owner_client, ext_run
):
    line = '{"type": "step", "step": 1, "metrics": {"loss": %s}}' % ("9" * 5000)
    r = _events(ext_run.pk, owner_client, line)
    assert r.status_code == 400
    assert errors_of(r)[0].startswith("line 1: "), errors_of(r)


@pytest.mark.parametrize(
    "url",
    [
        "/api/runs?offset=9223372036854775808",
        "/api/runs/{run}/trajectories?offset=9223372036854775808",
        "/api/runs/{run}/judgements?offset=9223372036854775808",
        "/api/runs/{run}/trajectories?since_step=9223372036854775808",
        "/api/runs/{run}/judgements?step=9223372036854775808",
        "/api/runs/{run}/backfill?since_step=9223372036854775808",
        "/api/runs/{run}/trajectories/9223372036854775808/0/0",
    ],
)
def test_an_offset_or_step_past_64_bits_is_a_400(owner_client, run, url):
    r = owner_client.get(url.format(run=run.pk))
    assert r.status_code == 400, r.content[:300]
    assert errors_of(r)


def test_a_model_whose_config_holds_1e999_is_unreadable_not_a_500(
    owner_client, tmp_path, settings
):
    root = tmp_path / "models"
    (root / "bad").mkdir(parents=True)
    (root / "bad" / "config.json").write_text(
        '{"vocab_size": 1e999, "hidden_size": 8, "intermediate_size": 16, '
        '"num_hidden_layers": 1, "num_attention_heads": 2}'
    )
    settings.MODEL_ROOTS = [root]
    model_dirs.clear_cache()
    try:
        r = owner_client.get("/runs/new/")
        assert r.status_code == 200
        html = r.content.decode()
        row = html[html.index('data-model-row="bad"') :].split("</tr>")[0]
        assert "unreadable" in row
        assert [m.params for m in model_dirs.list_models()] == [None]
    finally:
        model_dirs.clear_cache()


# --- item 10 ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["/api/runs", "/api/runs/external", "/api/runs/{run}/cancel"]
)
def test_an_anonymous_api_post_is_a_401(run, url):
    client = Client(enforce_csrf_checks=True)
    r = client.post(url.format(run=run.pk), "{}", content_type="application/json")
    assert r.status_code == 401
    assert r.json()["detail"]


def test_seed_true_is_not_an_integer(owner_client, tiny_config, enqueued):
    r = post_json(owner_client, "/api/runs", {"config": {**tiny_config, "seed": True}})
    assert_400_naming(r, "config.seed")
    assert enqueued == []


def test_a_405_from_the_api_is_json(owner_client):
    r = owner_client.delete("/api/runs")
    assert r.status_code == 405
    assert r["Content-Type"].startswith("application/json")
    assert r.json()["detail"]
