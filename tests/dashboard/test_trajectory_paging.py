"""Reading a trajectory back a page at a time (issue 21.2): the API's detail returns
segments from an offset while they fit the page's tokens and characters, with a link to
the next page; the trajectory page colours one page of tokens and links on."""

from __future__ import annotations

import json

import pytest

from dashboard.ingest import writer
from dashboard.models import Run

pytestmark = pytest.mark.django_db


def segment(n, text, turn):
    return {
        "turn": turn,
        "kind": "action",
        "text": text,
        "token_ids": list(range(n)),
        "tokens": [f"t{i}" for i in range(n)],
        "logprob": [-0.5] * n,
    }


def traj(segments):
    return {
        "type": "trajectory",
        "step": 1,
        "group": 0,
        "index": 0,
        "segments": segments,
    }


# --- reading back: a page at a time -------------------------------------------------
@pytest.fixture
def long_trajectory(owner, settings):
    """A stored trajectory of 40 segments of 1,000 tokens (limits raised to take it)."""
    settings.TRAJECTORY_MAX_TOKENS = 1 << 20
    run = Run.objects.create(owner=owner, name="r", config={}, external=True)
    segs = [segment(1000, text=f"turn {k} " * 20, turn=k) for k in range(40)]
    writer.store(run.pk, [traj(segs)])
    return run


def read(client, url):
    r = client.get(url)
    assert r.status_code == 200, r.content
    return r, r.json()


def test_a_long_trajectory_is_read_a_page_at_a_time_and_the_pages_add_up(
    owner_client, long_trajectory, settings
):
    settings.TRAJECTORY_PAGE_TOKENS = 4096
    url = f"/api/runs/{long_trajectory.pk}/trajectories/1/0/0"
    r, page = read(owner_client, url)
    assert [s["k"] for s in page["segments"]] == [0, 1, 2, 3]  # 4 x 1,000 tokens
    assert page["page"]["segments"] == 40 and page["page"]["tokens"] == 40_000
    assert len(r.content) < 400_000  # not the 40,000 tokens' arrays
    seen, ids = [], []
    while url:
        _, page = read(owner_client, url)
        seen += [s["k"] for s in page["segments"]]
        ids += [i for s in page["segments"] for i in s["token_ids"]]
        url = page["page"]["next"]
    assert seen == list(range(40))
    assert ids == list(range(1000)) * 40


def test_a_segment_larger_than_the_page_is_cut_and_marked(
    owner_client, long_trajectory
):
    url = f"/api/runs/{long_trajectory.pk}/trajectories/1/0/0?offset=5&max_tokens=300"
    _, page = read(owner_client, url)
    (seg,) = page["segments"]
    assert seg["k"] == 5 and seg["cut"] == {"tokens": 1000, "chars": len(seg["text"])}
    assert seg["token_ids"] == list(range(300)) and len(seg["logprob"]) == 300
    assert page["page"]["next_offset"] == 6


def test_a_page_larger_than_a_stored_trajectory_can_be_is_a_400_naming_it(
    owner_client, long_trajectory, settings
):
    settings.TRAJECTORY_MAX_TOKENS = 10_000
    url = f"/api/runs/{long_trajectory.pk}/trajectories/1/0/0?max_tokens=10001"
    r = owner_client.get(url)
    assert r.status_code == 400
    assert r.json()["detail"] == "max_tokens: at most 10000 (TRAJECTORY_MAX_TOKENS)"


def test_the_trajectory_page_of_a_long_trajectory_shows_one_page_of_colours(
    owner_client, long_trajectory, settings
):
    settings.TRAJECTORY_PAGE_TOKENS = 2000
    url = f"/runs/{long_trajectory.pk}/trajectories/1/0/0/"
    r = owner_client.get(url)
    assert r.status_code == 200
    html = r.content.decode()
    data = json.loads(
        html.split('id="heatmap-data" type="application/json">')[1].split("</script>")[
            0
        ]
    )
    coloured = [len(s["tokens"]) for s in data["segments"]]
    assert coloured == [1000, 1000] + [0] * 38
    assert "data-traj-page" in html and "segments 0–1 are shown in full" in html
    assert (
        f'href="/runs/{long_trajectory.pk}/trajectories/1/0/0/?from=2#segment-2"'
        in html
    )
    r = owner_client.get(url + "?from=38")
    data = json.loads(
        r.content.decode().split('type="application/json">')[1].split("</script>")[0]
    )
    assert [k for k, s in enumerate(data["segments"]) if s["tokens"]] == [38, 39]
    assert "from the start" in r.content.decode()
