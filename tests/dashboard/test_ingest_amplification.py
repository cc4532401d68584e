"""No amplification (issue 21.2) against a real Daphne: a gzip bomb and JSON bombs sent
to the events API are refused, each growing the server's RSS (its peak, sampled while
the request runs) by less than 50 MB and answered within a second of server CPU time."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
import realserver as rs

pytestmark = pytest.mark.slow

SETUP = """
from django.contrib.auth import get_user_model
from dashboard.site import tokens
from dashboard.runs import external
user = get_user_model().objects.create_user("bomber", password="pw-bomber-123")
print("SETUP", tokens.do_create_token(user, "t")[1],
      external.do_create_external_run(user, name="r").pk)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = rs.embedded_env(tmp_path_factory.mktemp("var"))
    rs.manage(env, "migrate", "-v0")
    out = rs.manage(env, "shell", "-c", SETUP)
    token, run_id = out.split("SETUP", 1)[1].split()
    with rs.daphne(env) as (port, proc):
        post = Poster(port, token, run_id)
        status, body, _ = post(b'{"type": "step", "step": 1, "metrics": {"a": 1}}\n')
        assert status == 200, body  # warm: every module a request needs is loaded
        yield post, proc


class Poster:
    def __init__(self, port: int, token: str, run_id: str) -> None:
        self.port, self.token, self.path = port, token, f"/api/runs/{run_id}/events"

    def __call__(self, body: bytes, encoding: str | None = None):
        extra = {"Content_Encoding": encoding} if encoding else {}
        auth = {"Authorization": f"Bearer {self.token}"}
        raw = rs.head(self.path, len(body), **auth, **extra) + body
        return rs.request(self.port, raw)


def _refused_cheaply(server, body: bytes, encoding: str | None = "gzip") -> str:
    post, proc = server
    with rs.PeakRss(proc) as rss:
        status, answer, _ = post(body, encoding)
    assert status == 413, answer[:300]
    assert rss.cpu_s < 1.0, f"{rss.cpu_s:.2f} s of server CPU"
    assert rss.growth < 50, f"{rss.growth:.0f} MB"
    return json.loads(answer)["detail"]


def test_a_gzip_bomb_is_refused_as_it_inflates(server):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = z.compress(b"a" * (1 << 30)) + z.flush()  # 1 GiB in about 1 MB
    detail = _refused_cheaply(server, bomb)
    assert "EVENTS_MAX_DECODED_BYTES" in detail


def test_a_body_of_200k_empty_gzip_members_is_refused_cheaply(server):
    # 4 MB under the body limit; reading it copied the rest of the body per member.
    detail = _refused_cheaply(server, gzip.compress(b"") * 200_000)
    assert "gzip members" in detail


def test_a_2m_token_trajectory_in_20_kb_of_gzip_is_refused(server):
    n = 2_000_000
    seg = {"kind": "action", "turn": 0, "token_ids": [0] * n, "logprob": [0.5] * n}
    event = {"type": "trajectory", "step": 1, "group": 0, "index": 0, "segments": [seg]}
    body = gzip.compress(json.dumps(event).encode(), 9)
    assert len(body) < 30_000
    detail = _refused_cheaply(server, body)
    assert "EVENTS_MAX_VALUES" in detail


def test_many_trajectories_each_within_the_caps_are_refused_as_a_whole(server):
    lines = [
        {
            "type": "trajectory",
            "step": 2,
            "group": 0,
            "index": i,
            "segments": [{"kind": "action", "token_ids": [0] * 100_000}],
        }
        for i in range(60)
    ]
    body = "".join(json.dumps(e) + "\n" for e in lines).encode()
    detail = _refused_cheaply(server, gzip.compress(body, 9))
    assert "EVENTS_MAX_VALUES" in detail


def test_deep_nesting_is_refused_without_recursing(server):
    depth = 2_000_000
    deep = b'{"type": "trajectory", "step": 3, "group": 0, "index": 0, "facts": '
    deep += b"[" * depth + b"]" * depth + b"}\n"
    detail = _refused_cheaply(server, gzip.compress(deep, 9))
    assert "EVENTS_MAX_VALUES" in detail


def test_one_oversized_segment_text_is_a_413_naming_the_field(server):
    seg = {"kind": "tool", "turn": 0, "text": "x" * (2 << 20)}
    event = {"type": "trajectory", "step": 4, "group": 0, "index": 0, "segments": [seg]}
    body = gzip.compress(json.dumps(event).encode())
    detail = _refused_cheaply(server, body)
    assert detail.startswith("line 1: segments.0.text: 2,097,152 characters")
    assert "(EVENT_MAX_TEXT_CHARS)" in detail
