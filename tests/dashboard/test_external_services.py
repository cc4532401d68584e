"""External runs on the production path: token-authenticated HTTP to Daphne ->
PostgreSQL -> frames over the Redis channel layer to a websocket client."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
from dashtest import client_for
from fake_runner import events_for_step
from websockets.sync.client import connect

from dashboard import tokens
from dashboard.models import MetricPoint, Run, Trajectory

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


def ndjson(events) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


def test_a_token_client_streams_an_external_run_into_a_live_page(owner, other, procs):
    server = procs.daphne()
    token = tokens.do_create_token(owner, "ci")[1]
    http = httpx.Client(
        base_url=f"http://{server}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    r = http.post(
        "/api/runs/external",
        json={"name": "trl-run", "framework": "trl", "config": {"beta": 0.0}},
    )
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]

    browser = client_for(owner)
    headers = {
        "Cookie": f"sessionid={browser.cookies['sessionid'].value}",
        "Origin": f"http://{server}",
    }
    with connect(
        f"ws://{server}/ws/runs/{run_id}/", additional_headers=headers, open_timeout=15
    ) as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["status"] == "running"
        frames = []
        for step in (1, 2, 3):
            body = gzip.compress(ndjson(events_for_step(3, step)))
            r = http.post(
                f"/api/runs/{run_id}/events",
                content=body,
                headers={
                    "Content-Type": "application/x-ndjson",
                    "Content-Encoding": "gzip",
                },
            )
            assert r.status_code == 200, r.text
            assert r.json()["duplicates"] == 0
            frames.append(json.loads(ws.recv(timeout=10)))
        assert [s["step"] for f in frames for s in f["steps"]] == [1, 2, 3]
        assert all(f["trajectories"] for f in frames)

        resent = http.post(
            f"/api/runs/{run_id}/events", content=ndjson(events_for_step(3, 2))
        )
        assert resent.json()["accepted"] == 0
        bad = http.post(
            f"/api/runs/{run_id}/events",
            content=ndjson(events_for_step(3, 4)) + b'{"type": "step"}\n',
        )
        assert bad.status_code == 400
        assert bad.json()["errors"][0].startswith(
            f"line {len(events_for_step(3, 4)) + 1}: step"
        )
        done = http.post(f"/api/runs/{run_id}/finish", json={"status": "succeeded"})
        assert done.status_code == 200
        final = json.loads(ws.recv(timeout=10))  # a resend is not news: no frame
        assert final["status"] == "succeeded" and final["steps"] == []

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.last_step, run.external) == ("succeeded", 3, True)
    assert Trajectory.objects.filter(run=run).count() == 6
    assert not MetricPoint.objects.filter(run=run, step=4).exists()

    theirs = tokens.do_create_token(other, "x")[1]
    r = httpx.get(
        f"http://{server}/api/runs/{run_id}",
        headers={"Authorization": f"Bearer {theirs}"},
    )
    assert r.status_code == 404
    tokens.do_revoke_token(owner, tokens.tokens_of(owner)[0].pk)
    assert http.get("/api/runs").status_code == 401
