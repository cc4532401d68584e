"""Readable tokens kept on the way in and out (issue 22.7): a segment's per-token
text, special-token positions and chat turns are stored beside its pieces, cut with
them (by the ingest limits and by a page of the trajectory), and reach the page's
heatmap data; the heatmap builds its spans from them (tests/e2e for the browser)."""

from __future__ import annotations

import json

import pytest

from dashboard.ingest import writer
from dashboard.models import Run, Trajectory

pytestmark = pytest.mark.django_db

PIECES = ["<|im_start|>", "user", "Ċ", "caf", "Ã", "©", "Ġ7", "<|im_end|>", "Ċ"]
TEXTS = ["<|im_start|>", "user", "\n", "caf", "", "é", " 7", "<|im_end|>", "\n"]


def traj(n=9):  # all of PIECES
    seg = {
        "turn": 0,
        "kind": "prompt",
        "text": "".join(TEXTS[:n]),
        "token_ids": list(range(n)),
        "tokens": PIECES[:n],
        "token_text": TEXTS[:n],
        "special": [k for k in (0, 7) if k < n],
        "turns": [[0, "user"]],
        "logprob": [None] * n,
    }
    return {"type": "trajectory", "step": 1, "group": 0, "index": 0, "segments": [seg]}


@pytest.fixture
def run(owner):
    return Run.objects.create(owner=owner, name="r", config={}, external=True)


def heatmap(client, run, query=""):
    r = client.get(f"/runs/{run.pk}/trajectories/1/0/0/{query}")
    assert r.status_code == 200
    html = r.content.decode()
    blob = html.split('id="heatmap-data" type="application/json">')[1]
    return json.loads(blob.split("</script>")[0])["segments"]


def test_text_special_tokens_and_turns_reach_the_heatmap(owner_client, run):
    writer.store(run.pk, [traj()])
    (seg,) = heatmap(owner_client, run)
    assert seg["tokens"] == PIECES and seg["token_text"] == TEXTS
    assert seg["special"] == [0, 7] and seg["turns"] == [[0, "user"]]


def test_the_api_returns_them_too(owner_client, run):
    writer.store(run.pk, [traj()])
    r = owner_client.get(f"/api/runs/{run.pk}/trajectories/1/0/0")
    (seg,) = r.json()["segments"]
    assert seg["token_text"] == TEXTS and seg["special"] == [0, 7]


def test_a_page_cut_inside_the_segment_keeps_only_its_positions(
    owner_client, run, settings
):
    writer.store(run.pk, [traj()])
    settings.TRAJECTORY_PAGE_TOKENS = 5
    (seg,) = heatmap(owner_client, run)
    assert seg["token_text"] == TEXTS[:5] and seg["special"] == [0]


def test_the_ingest_limit_cuts_texts_and_positions_with_the_pieces(run, settings):
    settings.TRAJECTORY_MAX_TOKENS = 6
    writer.store(run.pk, [traj()])
    from dashboard.reads import trajectories as reads

    t = Trajectory.objects.get(run=run)
    page = reads.segment_page(t, 0, 100, 10_000)
    (seg,) = page.segments
    assert seg["token_text"] == TEXTS[:6] and seg["special"] == [0]


def test_hostile_positions_are_dropped_not_stored(run):
    event = traj()
    seg = event["segments"][0]
    seg["special"] = [0, -1, 99, "x", 2**40]
    seg["turns"] = [[0, "user"], [50, "tool"], ["a", "b"], [1], 3]
    writer.store(run.pk, [event])
    from dashboard.reads import trajectories as reads

    (seg,) = reads.segment_page(
        Trajectory.objects.get(run=run), 0, 100, 10_000
    ).segments
    assert seg["special"] == [0] and seg["turns"] == [[0, "user"]]
