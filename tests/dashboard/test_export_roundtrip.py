"""Export, import, export again gives the same file (issue 22, item 4).

A run's export (``GET /api/runs/{id}/export``) starts with a ``{"type": "run"}``
header; ``python -m trainer import`` takes that file as it is, against a real
server (Django's live server): the header becomes the new run's name, framework,
config and final status, and every line after it comes back identical.
"""

from __future__ import annotations

import json

import pytest
from test_run_api import body_of

from dashboard.models import Run
from dashboard.site import tokens
from trainer.cli import main as cli

pytestmark = pytest.mark.django_db(transaction=True)

# The header's other fields name the run record (id, created_at, attempt, parent,
# external): the copy is a new, external run.
SAME_IN_HEADER = ("name", "status", "last_step", "config", "parts")


def _export(client, run_id) -> list[dict]:
    r = client.get(f"/api/runs/{run_id}/export")
    assert r.status_code == 200
    return [json.loads(x) for x in body_of(r).decode().splitlines()]


@pytest.fixture(params=["native", "trl"])
def finished_run(request, run):
    """The ``run`` fixture's 6 steps of events, finished."""
    framework = "" if request.param == "native" else request.param
    Run.objects.filter(pk=run.pk).update(status="succeeded", framework=framework)
    return run


def test_an_export_imports_and_exports_again_the_same(
    finished_run, owner, owner_client, live_server, tmp_path, monkeypatch
):
    first = _export(owner_client, finished_run.pk)
    assert first[0]["type"] == "run" and len(first) > 20
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in first))
    monkeypatch.setenv("DASHBOARD_TOKEN", tokens.do_create_token(owner, "t")[1])
    assert cli(["import", str(path), "--report-to", live_server.url]) == 0

    (copy,) = Run.objects.exclude(pk=finished_run.pk)
    again = _export(owner_client, copy.pk)
    for key in SAME_IN_HEADER:
        assert again[0][key] == first[0][key], key
    assert again[1:] == first[1:]
    assert copy.status == "succeeded" and copy.external
    assert copy.framework == (first[0]["framework"] or "import")
