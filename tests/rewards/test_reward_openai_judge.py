"""The OpenAI-compatible judge against a small local HTTP server (127.0.0.1, port 0)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rewards import EndpointSpec
from rewards.config import JudgeConfig
from rewards.judges import build_judges
from rewards.synthetic import episode

GOOD = "rationale: solid work\nq: 8\nstep: 0"


class Server:
    """Answers by the first path segment; counts the requests each mode received."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                mode = self.path.strip("/").split("/")[0]
                server.hits[mode] = server.hits.get(mode, 0) + 1
                n = int(self.headers.get("content-length", 0))
                server.bodies.append(json.loads(self.rfile.read(n)))
                server.headers.append(dict(self.headers))
                server.respond(self, mode, server.hits[mode])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def send(
        h: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str
    ) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k.replace("_", "-"), v)
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def respond(self, h: BaseHTTPRequestHandler, mode: str, hit: int) -> None:
        chat = json.dumps({"choices": [{"message": {"content": GOOD}}]}).encode()
        if mode == "ok" or (mode == "flaky" and hit > 1):
            self.send(h, 200, chat)
        elif mode in ("fail", "flaky"):
            self.send(h, 500, b"boom")
        elif mode == "slow":
            time.sleep(1.0)
            self.send(h, 200, chat)
        elif mode == "redirect":
            self.send(
                h,
                302,
                b"",
                location=f"http://127.0.0.1:{self.port}/ok/v1/chat/completions",
            )
        elif mode == "garbage":
            self.send(h, 200, b"{not json")
        elif mode == "shape":
            self.send(h, 200, b'{"choices": []}')
        elif mode == "nonsense":
            self.send(
                h,
                200,
                json.dumps({"choices": [{"message": {"content": "q: lots"}}]}).encode(),
            )
        elif mode == "huge":
            self.send(h, 200, b"x" * 5000)
        elif mode == "denied":
            self.send(h, 403, b"forbidden")

    def spec(self, mode: str, **kw) -> EndpointSpec:
        kw.setdefault("backoff_s", 0.0)
        return EndpointSpec(
            mode, f"http://127.0.0.1:{self.port}/{mode}/v1", model="m", **kw
        )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture(autouse=True)
def fresh_counts(server: Server) -> None:
    server.hits.clear()
    server.bodies.clear()
    server.headers.clear()


def judge_with(server: Server, endpoint: str, specs: list[EndpointSpec], **kw):
    cfg = JudgeConfig(
        name="remote", backend="openai", endpoint=endpoint, rubric=[{"name": "q"}], **kw
    )
    (judge,) = build_judges([cfg], endpoints={s.name: s for s in specs})
    (jd,) = judge([episode("calc", [{"tool": "answer"}])])
    return jd


def test_it_scores_a_good_answer_and_sends_the_rubric(server):
    jd = judge_with(server, "ok", [server.spec("ok", api_key="sekret")])
    assert jd.ok and jd.score == pytest.approx(0.8) and jd.target_step == 0
    assert jd.rationale == "solid work" and jd.raw == GOOD
    body = server.bodies[0]
    assert body["model"] == "m" and body["temperature"] == 0
    assert "q: <a number from 0 to 10>" in body["messages"][0]["content"]
    assert server.headers[0]["Authorization"] == "Bearer sekret"


def test_it_refuses_an_endpoint_not_on_the_allow_list(server):
    jd = judge_with(server, "elsewhere", [server.spec("ok")])
    assert not jd.ok and jd.error == (
        "endpoint 'elsewhere' is not on the allow-list (allowed: ok)"
    )
    assert server.hits == {}


def test_it_times_out_and_retries_before_failing(server):
    started = time.perf_counter()
    jd = judge_with(server, "slow", [server.spec("slow")], timeout_s=0.2, retries=1)
    assert not jd.ok and "timeout" in jd.error and "after 2 attempt(s)" in jd.error
    assert server.hits["slow"] == 2
    assert time.perf_counter() - started < 1.5


def test_it_caps_the_timeout_at_the_endpoints_limit(server):
    jd = judge_with(
        server, "slow", [server.spec("slow", timeout_s=0.2)], timeout_s=60, retries=0
    )
    assert not jd.ok and "timeout" in jd.error


def test_it_retries_a_500_with_bounded_attempts(server):
    jd = judge_with(server, "fail", [server.spec("fail")], retries=2)
    assert not jd.ok and jd.error == "endpoint 'fail': HTTP 500 after 3 attempt(s)"
    assert server.hits["fail"] == 3


def test_it_recovers_when_a_retry_succeeds(server):
    jd = judge_with(server, "flaky", [server.spec("flaky")], retries=1)
    assert jd.ok and server.hits["flaky"] == 2


def test_it_backs_off_between_retries(server):
    started = time.perf_counter()
    judge_with(server, "fail", [server.spec("fail", backoff_s=0.1)], retries=2)
    assert time.perf_counter() - started >= 0.1 + 0.2


def test_it_does_not_follow_or_retry_a_redirect(server):
    jd = judge_with(server, "redirect", [server.spec("redirect")], retries=3)
    assert not jd.ok and "HTTP 302 redirect" in jd.error and "refused" in jd.error
    assert server.hits == {"redirect": 1}  # the target (/ok) was never asked


def test_it_does_not_retry_a_4xx_and_keeps_the_body(server):
    jd = judge_with(server, "denied", [server.spec("denied")], retries=3)
    assert not jd.ok and "HTTP 403 (not retried)" in jd.error and jd.raw == "forbidden"
    assert server.hits == {"denied": 1}


def test_it_records_garbage_json_with_the_raw_text(server):
    jd = judge_with(server, "garbage", [server.spec("garbage")])
    assert not jd.ok and "not a chat completion" in jd.error and jd.raw == "{not json"
    jd = judge_with(server, "shape", [server.spec("shape")])
    assert not jd.ok and "not a chat completion (IndexError)" in jd.error


def test_it_records_an_unparseable_answer_with_the_raw_text(server):
    jd = judge_with(server, "nonsense", [server.spec("nonsense")])
    assert not jd.ok and jd.raw == "q: lots" and "unparseable judge output" in jd.error


def test_it_caps_the_response_size(server):
    jd = judge_with(server, "huge", [server.spec("huge", max_response_bytes=1000)])
    assert not jd.ok and "larger than 1000 bytes" in jd.error


def test_it_records_an_unreachable_endpoint(server):
    with socket.socket() as sock:  # a port that was free a moment ago: nobody listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = EndpointSpec(
        "down", f"http://127.0.0.1:{port}/v1", model="m", backoff_s=0.0
    )
    jd = judge_with(server, "down", [closed], retries=1)
    assert not jd.ok and "connection error" in jd.error


def test_it_needs_a_model_name_from_the_judge_or_the_endpoint(server):
    bare = EndpointSpec("bare", f"http://127.0.0.1:{server.port}/ok/v1")
    jd = judge_with(server, "bare", [bare])
    assert not jd.ok and "no model configured" in jd.error
    assert judge_with(server, "bare", [bare], model="m").ok


def test_it_judges_a_whole_batch_through_a_bounded_pool(server):
    cfg = JudgeConfig(
        name="remote", backend="openai", endpoint="ok", rubric=[{"name": "q"}]
    )
    (judge,) = build_judges(
        [cfg], endpoints={"ok": server.spec("ok", max_concurrency=3)}
    )
    eps = [episode("calc", [{"tool": "answer"}], task_id=f"t{i}") for i in range(5)]
    got = judge(eps)
    assert len(got) == 5 and all(j.ok for j in got) and server.hits == {"ok": 5}


def test_it_validates_endpoint_specs_and_hides_the_key():
    with pytest.raises(ValueError, match="http"):
        EndpointSpec("x", "file:///etc/passwd")
    assert "sekret" not in repr(EndpointSpec("x", "http://h/v1", api_key="sekret"))
