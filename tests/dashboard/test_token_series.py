"""A segment's ``series``: the per-token arrays another trainer keeps beyond ours
(prime-rl's mismatch_kl, miles's ref_log_probs...), stored packed with the tokens,
read back by name through the API, offered by the trajectory page's colour-by
selector, and bounded like every other per-token array."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from dashboard.ingest import arrays, bounds, writer
from dashboard.models import GroupPrompt, Run, Trajectory
from dashboard.reads import trajectories

pytestmark = pytest.mark.django_db


def _traj(index, series):
    action = {
        "turn": 0,
        "kind": "action",
        "text": f"answer {index}",
        "token_ids": [10 + index, 20, 30],
        "tokens": ["a", "b", "c"],
        "logprob": [-0.5, -0.25, -1.0],
        "advantage": [1.0, 1.0, 1.0],
        "mask": None,
    }
    if series is not None:
        action["series"] = series
    return {
        "type": "trajectory",
        "step": 1,
        "group": 0,
        "index": index,
        "reward": 1.0,
        "segments": [
            {
                "turn": 0,
                "kind": "prompt",
                "text": "shared prompt",
                "token_ids": [1, 2],
                "tokens": ["x", "y"],
                "mask": "prompt",
                "series": {"is_masked": [0.0, 0.0]},
            },
            action,
        ],
    }


@pytest.fixture
def stored(owner):
    run = Run.objects.create(owner=owner, name="r", config={})
    kl = {"mismatch_kl": [0.03, None, 0.5], "is_masked_high": [0.0, 1.0, 0.0]}
    writer.store(run.pk, [_traj(0, kl), _traj(1, None)])
    return run


def test_series_are_stored_packed_and_read_back_by_name(stored, owner_client):
    # Both rollouts start with the same prompt (its series included): stored once.
    assert GroupPrompt.objects.filter(run=stored).count() == 1
    first = Trajectory.objects.get(run=stored, index=0)
    assert first.segments[0]["series"] == ["mismatch_kl", "is_masked_high"]
    # 4 bytes a token for the ids, each of our 5 arrays and each of the 2 series
    assert len(first.arrays) == 4 * 3 * (1 + 5 + 2)
    url = f"/api/runs/{stored.pk}/trajectories/1/0/0"
    prompt, action = owner_client.get(url).json()["segments"]
    assert prompt["series"] == {"is_masked": [0.0, 0.0]}
    assert action["series"] == {  # a missing value reads NaN, like ours
        "mismatch_kl": [0.03, "NaN", 0.5],
        "is_masked_high": [0.0, 1.0, 0.0],
    }
    assert action["logprob"] == [-0.5, -0.25, -1.0]  # ours read as before
    plain = owner_client.get(f"/api/runs/{stored.pk}/trajectories/1/0/1").json()
    assert "series" not in plain["segments"][1]
    text = trajectories.trajectory_text(first)["segments"]
    assert all("series" not in seg for seg in text)  # no per-token floats there


def test_a_page_cut_of_a_long_segment_cuts_its_series_alike(stored):
    page = trajectories.segment_page(
        Trajectory.objects.get(run=stored, index=0), 1, 2, 10_000
    )
    (action,) = page.segments
    assert action["token_ids"] == [10, 20] and action["cut"]["tokens"] == 3
    assert action["series"] == {"mismatch_kl": [0.03, "NaN"], "is_masked_high": [0, 1]}


def test_a_trajectory_stored_before_series_reads_as_it_did(owner):
    # The blob of a row written before series: ids then our 5 arrays, no more.
    run = Run.objects.create(owner=owner, name="old", config={})
    ids = np.asarray([7, 8], dtype="<i4").tobytes()
    floats = np.asarray([-0.5, -0.25], dtype="<f4").tobytes()
    meta = {"turn": 0, "kind": "action", "text": "hi", "tokens": [], "mask": None}
    Trajectory.objects.create(
        run=run,
        step=1,
        group=0,
        index=0,
        segments=[{**meta, "n": 2}],
        arrays=ids + floats * 5,
    )
    (seg,) = trajectories.trajectory_detail(Trajectory.objects.get(run=run))["segments"]
    assert seg["token_ids"] == [7, 8] and seg["entropy"] == [-0.5, -0.25]
    assert "series" not in seg


def test_the_page_offers_each_series_to_colour_tokens_by(stored, owner_client):
    html = owner_client.get(f"/runs/{stored.pk}/trajectories/1/0/0/").content.decode()
    select = re.search(r"<select data-colour-by.*?</select>", html, re.S).group(0)
    values = re.findall(r'<option value="([^"]+)"', select)
    assert values[-3:] == [
        "series:is_masked",
        "series:mismatch_kl",
        "series:is_masked_high",
    ]
    data = re.search(
        r'<script id="heatmap-data" type="application/json">(.*?)</script>', html, re.S
    ).group(1)
    segments = json.loads(data)["segments"]
    assert segments[1]["series"]["mismatch_kl"] == [0.03, "NaN", 0.5]
    other = owner_client.get(f"/runs/{stored.pk}/trajectories/1/0/1/").content
    assert b"series:mismatch_kl" not in other and b"series:is_masked" in other


def test_a_series_past_the_token_limit_is_named_and_cut(settings):
    settings.TRAJECTORY_MAX_TOKENS = 2
    event = _traj(0, {"mismatch_kl": [0.1, 0.2, 0.3]})
    event["segments"] = event["segments"][1:]
    names = [e.field for e in bounds.excesses(event)]
    assert "segments.0.series.mismatch_kl" in names
    cut = bounds.bounded(event)["segments"][0]
    assert cut["series"] == {"mismatch_kl": [0.1, 0.2]} and len(cut["token_ids"]) == 2


def test_packing_keeps_sixteen_series_with_valid_names_only():
    series = {f"s{i}": [float(i)] for i in range(20)} | {"1bad": [1.0]}
    ((meta, blob),) = arrays.pack_segment_list(
        [{"kind": "action", "token_ids": [5], "series": series}]
    )
    assert meta["series"] == [f"s{i}" for i in range(16)]
    assert len(blob) == 4 * (1 + 5 + 16)
