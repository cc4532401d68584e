"""No amplification (issue 21.2), in-process: decompression capped while it runs, a
body's JSON values counted before it is parsed, what one trajectory or judgement may
hold (tokens, per-token arrays, segments, agent steps, text per field) on every write
path. A real server's memory under these bombs: test_ingest_amplification.py; reading
a trajectory back a page at a time: test_trajectory_paging.py."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from django.test import Client

from dashboard.ingest import bounds, writer
from dashboard.models import Judgement, MetricPoint, Run, Trajectory
from dashboard.runs import event_body, external, lease, services
from dashboard.runs.sinks import RunSink
from dashboard.site import tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_limits(settings):
    settings.TRAJECTORY_MAX_TOKENS = 100
    settings.TRAJECTORY_MAX_SEGMENTS = 8
    settings.TRAJECTORY_MAX_STEPS = 8
    settings.EVENT_MAX_TEXT_CHARS = 50
    return settings


@pytest.fixture
def api(owner):
    token = tokens.do_create_token(owner, "test")[1]
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    r = client.post(
        "/api/runs/external",
        json.dumps({"name": "r", "framework": "trl"}),
        content_type="application/json",
        **auth,
    )
    return client, auth, r.json()["id"]


def post(api, body: bytes, **headers):
    client, auth, run_id = api
    return client.post(
        f"/api/runs/{run_id}/events",
        body,
        content_type="application/x-ndjson",
        **auth,
        **headers,
    )


def traj(index=0, segments=None, **extra):
    segments = segments if segments is not None else [segment(10)]
    return {
        "type": "trajectory",
        "step": 1,
        "group": 0,
        "index": index,
        "segments": segments,
        **extra,
    }


def segment(n, text="hello", turn=0, **extra):
    return {
        "turn": turn,
        "kind": "action",
        "text": text,
        "token_ids": list(range(n)),
        "tokens": [f"t{i}" for i in range(n)],
        "logprob": [-0.5] * n,
        **extra,
    }


def lines(*events) -> bytes:
    return "".join(json.dumps(e) + "\n" for e in events).encode()


# --- decompression --------------------------------------------------------------------
def test_a_gzip_bomb_is_refused_once_the_decoded_limit_is_passed(settings):
    settings.EVENTS_MAX_DECODED_BYTES = 1 << 20
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = z.compress(b"a" * (64 << 20)) + z.flush()  # 64 MB in ~64 KB
    with pytest.raises(external.PayloadTooLarge) as err:
        external.decode_body(bomb, "gzip")
    assert "EVENTS_MAX_DECODED_BYTES" in str(err.value)
    assert "1048576 bytes" in str(err.value)


class InflateSpy:
    """zlib.decompressobj, recording (bytes out, max_length) of every call."""

    calls: list[tuple[int, int]] = []
    real = staticmethod(zlib.decompressobj)

    def __init__(self, *args):
        self.d = self.real(*args)

    def decompress(self, data, max_length=0):
        out = self.d.decompress(data, max_length)
        self.calls.append((len(out), max_length))
        return out

    def __getattr__(self, name):
        return getattr(self.d, name)


@pytest.fixture
def inflated(monkeypatch):
    monkeypatch.setattr(InflateSpy, "calls", [])
    monkeypatch.setattr(zlib, "decompressobj", InflateSpy)
    return InflateSpy.calls


def test_decoding_counts_while_it_runs_and_never_holds_more_than_a_chunk_past_the_limit(
    settings, inflated
):
    settings.EVENTS_MAX_DECODED_BYTES = 1 << 20
    bomb = zlib.compress(b"x" * (64 << 20), 9)
    with pytest.raises(external.PayloadTooLarge):
        external.decode_body(bomb, "deflate")
    assert all(0 < limit <= 1 << 18 for _, limit in inflated)  # bounded output per call
    assert sum(n for n, _ in inflated) <= (1 << 20) + (1 << 18)  # stopped at the limit


@pytest.mark.parametrize(
    ("fill", "limit"), [(b"\n", "EVENTS_MAX_LINES"), (b"0,", "EVENTS_MAX_VALUES")]
)
def test_a_bomb_of_lines_or_values_stops_within_its_first_chunks(inflated, fill, limit):
    bomb = zlib.compress(fill * (16 << 20), 9)  # 16 or 32 MB
    with pytest.raises(external.PayloadTooLarge, match=limit):
        external.decode_body(bomb, "deflate")
    assert sum(n for n, _ in inflated) <= 3 << 20  # 1M values: 2 MB of "0,"


def test_every_gzip_member_is_decoded_and_a_cut_stream_is_a_400():
    body = lines(*[{"type": "step", "step": s, "metrics": {"a": 1}} for s in (1, 2)])
    two = gzip.compress(body[:20]) + gzip.compress(body[20:])
    assert bytes(external.decode_body(two, "gzip")) == body
    assert bytes(external.decode_body(zlib.compress(body), "deflate")) == body
    for cut, encoding in ((gzip.compress(body)[:-12], "gzip"), (b"\x78", "deflate")):
        with pytest.raises(external.InvalidConfig, match="not valid"):
            external.decode_body(cut, encoding)


def test_empty_members_and_nul_padding_around_the_data_are_read_as_nothing():
    body = lines({"type": "step", "step": 1, "metrics": {"a": 1}})
    empty = gzip.compress(b"")
    for sent in (
        gzip.compress(body) + empty,  # a writer's empty last member: not "cut"
        empty + gzip.compress(body) + empty * 3,
        gzip.compress(body) + b"\x00" * 64,
    ):
        assert bytes(external.decode_body(sent, "gzip")) == body
    with pytest.raises(external.InvalidConfig, match="not valid"):
        external.decode_body(gzip.compress(body) + b"\x00x", "gzip")


def test_a_body_of_more_gzip_members_than_the_limit_is_a_413(monkeypatch):
    # Each member is read where it starts (nothing past it copied); a body of
    # 200,000 empty members once took 40 s of CPU copying the rest per member.
    monkeypatch.setattr(event_body, "GZIP_MAX_MEMBERS", 5)
    body = lines({"type": "step", "step": 1, "metrics": {"a": 1}})
    cuts = [len(body) * k // 5 for k in range(6)]
    five = b"".join(
        gzip.compress(body[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)
    )
    assert bytes(external.decode_body(five, "gzip")) == body
    with pytest.raises(event_body.PayloadTooLarge, match="more than 5 gzip members"):
        external.decode_body(five + gzip.compress(b""), "gzip")


# --- a body's values --------------------------------------------------------------------
def test_a_body_with_more_json_values_than_the_limit_is_a_413_before_parsing(
    api, settings, monkeypatch
):
    settings.EVENTS_MAX_VALUES = 5000
    parsed = []
    monkeypatch.setattr(event_body, "_event", lambda line: parsed.append(line))
    body = lines(traj(segments=[{"kind": "action", "token_ids": [0] * 6000}]))
    r = post(api, gzip.compress(body), HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 413, r.content
    assert "EVENTS_MAX_VALUES" in r.json()["detail"]
    assert "5,000" in r.json()["detail"]
    assert parsed == []  # refused before a line was parsed


# --- what one event may hold: the events API refuses --------------------------------
@pytest.mark.parametrize(
    ("event", "field", "limit"),
    [
        (
            traj(segments=[segment(60), segment(60)]),
            "segments: 120 tokens",
            "TRAJECTORY_MAX_TOKENS",
        ),
        (
            traj(segments=[segment(5, logprob=[0.0] * 101)]),
            "segments.0.logprob: 101 values",
            "TRAJECTORY_MAX_TOKENS",
        ),
        (
            traj(segments=[{"kind": "action", "text": "x", "n": 500}]),
            "segments: 500 tokens",
            "TRAJECTORY_MAX_TOKENS",
        ),
        (
            traj(segments=[segment(1)] * 9),
            "segments: 9 segments",
            "TRAJECTORY_MAX_SEGMENTS",
        ),
        (traj(steps=[{"action": "a"}] * 9), "steps: 9 steps", "TRAJECTORY_MAX_STEPS"),
        (
            traj(rewards={"per_step": {"correct": [1.0] * 9}}),
            "rewards.per_step.correct: 9 values",
            "TRAJECTORY_MAX_STEPS",
        ),
        (
            traj(segments=[segment(1, text="p" * 51)]),
            "segments.0.text: 51 characters",
            "EVENT_MAX_TEXT_CHARS",
        ),
        (
            traj(steps=[{"observation": "o" * 60}]),
            "steps.0.observation: 60 characters",
            "EVENT_MAX_TEXT_CHARS",
        ),
        (
            traj(facts={"log": {"tail": "f" * 51}}),
            "facts.log.tail: 51 characters",
            "EVENT_MAX_TEXT_CHARS",
        ),
        (
            {
                "type": "judgement",
                "step": 1,
                "group": 0,
                "index": 0,
                "judge": "j",
                "rationale": "r" * 51,
            },
            "rationale: 51 characters",
            "EVENT_MAX_TEXT_CHARS",
        ),
    ],
)
def test_an_event_past_a_limit_is_a_413_naming_the_field_and_the_limit(
    api, small_limits, event, field, limit
):
    ok = {"type": "step", "step": 1, "metrics": {"reward": 1.0}}
    r = post(api, lines(ok, event))
    assert r.status_code == 413, r.content
    detail = r.json()["detail"]
    assert detail.startswith(f"line 2: {field}, more than the limit of ")
    assert f"({limit})" in detail
    assert not MetricPoint.objects.exists()  # all or nothing
    assert not Trajectory.objects.exists() and not Judgement.objects.exists()


def test_an_event_at_the_limits_is_stored_whole(api, small_limits):
    event = traj(
        segments=[segment(50, text="p" * 50), segment(50, turn=1)],
        steps=[{"observation": "o" * 50}] * 8,
        rewards={"per_step": {"correct": [1.0] * 8}},
    )
    r = post(api, lines(event))
    assert r.status_code == 200, r.content
    t = Trajectory.objects.get()
    assert t.clipped == [] and [s["n"] for s in t.segments] == [50, 50]


def test_the_server_owns_the_clipped_mark(api, small_limits):
    r = post(api, lines(traj(_clipped=["not cut at all"])))
    assert r.status_code == 200, r.content
    assert Trajectory.objects.get().clipped == []


# --- our own trainer's sink: cut and marked, the batch kept -------------------------
@pytest.mark.django_db(transaction=True)  # the sink writes from a thread of its own
def test_the_run_sink_stores_an_oversized_trajectory_cut_and_marked_with_its_batch(
    owner, tiny_config, enqueued, published, small_limits
):
    run = services.launch_run(owner, tiny_config)
    sink = RunSink(lease.claim(run.id), interval_s=0.01)
    big = traj(
        segments=[segment(80, text="a" * 70), segment(80, turn=1)]
        + [segment(1, turn=2)] * 8,
        steps=[{"observation": "o" * 60}] * 10,
    )
    judgement = {
        "type": "judgement",
        "step": 1,
        "group": 0,
        "index": 0,
        "judge": "j",
        "rationale": "r" * 80,
    }
    sink.emit({"type": "step", "step": 1, "metrics": {"reward": 1.0}})
    sink.emit(big)
    sink.emit(judgement)
    sink.close()
    assert sink.dropped_batches == 0
    assert MetricPoint.objects.filter(run_id=run.id).count() == 1  # the batch stayed
    t = Trajectory.objects.get(run_id=run.id)
    assert [s["n"] for s in t.segments] == [80, 20, 0, 0, 0, 0, 0, 0]
    assert len(t.arrays) == 100 * 24  # 100 tokens packed, no more
    assert t.segments[0]["text"].startswith("a" * 50 + " [cut: 20 more characters")
    assert len(t.agent_steps) == 8
    assert any("TRAJECTORY_MAX_TOKENS" in n for n in t.clipped)
    assert any("TRAJECTORY_MAX_SEGMENTS" in n for n in t.clipped)
    assert any(n.startswith("steps.0.observation: 60 characters") for n in t.clipped)
    rationale = Judgement.objects.get(run_id=run.id).rationale
    assert rationale == "r" * 50 + " [cut: 30 more characters, EVENT_MAX_TEXT_CHARS]"


def test_bounded_leaves_an_event_within_the_limits_as_it_is(small_limits):
    step = {"type": "step", "step": 1, "metrics": {"a": 1.0}}
    assert bounds.bounded(step) is step
    event = traj()
    out = bounds.bounded(event)
    assert out[bounds.CLIPPED] == [] and out["segments"] is event["segments"]


def test_the_writer_cuts_whatever_calls_it(owner, small_limits):
    run = Run.objects.create(owner=owner, name="r", config={}, external=True)
    writer.store(run.pk, [traj(segments=[segment(300)])])
    t = Trajectory.objects.get()
    assert t.segments[0]["n"] == 100 and t.clipped
