"""A judge behind an OpenAI-compatible chat endpoint (vLLM, llama.cpp's server...).

Endpoints are not free-form URLs in the run config: an admin registers them, the
platform passes the allow-list in as :class:`EndpointSpec` objects, and a judge names
one. A name not on the list is a recorded failure naming it. Requests never follow
redirects (an allowed host must not bounce us elsewhere), have a timeout capped by the
admin's, retry with exponential backoff only on 5xx, timeouts and connection errors
(a 4xx will not improve), and read at most ``max_response_bytes``; a batch keeps up
to ``max_concurrency`` requests in flight. The reply is
untrusted text: stored and parsed, never evaluated.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from rewards.config import JudgeConfig
from rewards.judges.base import (
    JudgeDeps,
    build_prompt,
    failure,
    judgement_from_text,
)
from rewards.judges.endpoints import EndpointSpec
from rewards.registry import JUDGE_BACKENDS
from rewards.types import Episode, Judgement


class EndpointError(Exception):
    """A request that failed for good; ``raw`` is what the server sent, if anything."""

    def __init__(self, message: str, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


class _Retry(Exception):
    pass


def _read_capped(resp: httpx.Response, cap: int) -> bytes:
    body = bytearray()
    for chunk in resp.iter_bytes():
        body += chunk
        if len(body) > cap:
            raise EndpointError(f"response larger than {cap} bytes")
    return bytes(body)


def _attempt(
    client: httpx.Client, url: str, payload: dict[str, Any], cap: int
) -> bytes:
    try:
        with client.stream("POST", url, json=payload) as resp:
            status = resp.status_code
            if 300 <= status < 400:
                where = resp.headers.get("location", "")[:200]
                raise EndpointError(f"HTTP {status} redirect to {where!r} refused")
            if status >= 500:
                raise _Retry(f"HTTP {status}")
            body = _read_capped(resp, cap)
            if status >= 400:
                text = body[:2000].decode("utf-8", "replace")
                raise EndpointError(f"HTTP {status} (not retried)", raw=text)
            return body
    except httpx.TimeoutException as exc:
        raise _Retry(f"timeout ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise _Retry(f"connection error ({type(exc).__name__})") from exc


def _content(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EndpointError(
            f"not a chat completion ({type(exc).__name__})", raw=text
        ) from exc
    if not isinstance(content, str):
        raise EndpointError("chat completion content is not text", raw=text)
    return content


class OpenAIJudge:
    backend = "openai"

    def __init__(self, cfg: JudgeConfig, endpoints: Mapping[str, EndpointSpec]) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.spec = endpoints.get(str(cfg.endpoint))
        self._allowed = sorted(endpoints)

    def post(self, client: httpx.Client, payload: dict[str, Any]) -> str:
        """The reply's text, retrying transient failures; raises EndpointError."""
        spec = self.spec
        assert spec is not None
        url = spec.base_url.rstrip("/") + "/chat/completions"
        last = "no attempt"
        for attempt in range(self.cfg.retries + 1):
            if attempt:
                time.sleep(spec.backoff_s * 2 ** (attempt - 1))
            try:
                return _content(_attempt(client, url, payload, spec.max_response_bytes))
            except _Retry as exc:
                last = str(exc)
        raise EndpointError(f"{last} after {self.cfg.retries + 1} attempt(s)")

    def judge_one(self, client: httpx.Client, ep: Episode) -> Judgement:
        assert self.spec is not None
        model = self.cfg.model or self.spec.model
        if not model:
            return failure(
                self.cfg, f"endpoint {self.spec.name!r}: no model configured"
            )
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": build_prompt(self.cfg, ep)}],
            "max_tokens": self.cfg.max_tokens,
            "temperature": 0,
        }
        try:
            raw = self.post(client, payload)
        except EndpointError as exc:
            return failure(self.cfg, f"endpoint {self.spec.name!r}: {exc}", raw=exc.raw)
        return judgement_from_text(self.cfg, raw, ep)

    def __call__(self, episodes: Sequence[Episode]) -> list[Judgement]:
        if self.spec is None:
            allowed = ", ".join(self._allowed) or "none"
            err = (
                f"endpoint {self.cfg.endpoint!r} is not on the allow-list "
                f"(allowed: {allowed})"
            )
            return [failure(self.cfg, err) for _ in episodes]
        headers = (
            {"Authorization": f"Bearer {self.spec.api_key}"}
            if self.spec.api_key
            else {}
        )
        timeout = min(self.cfg.timeout_s, self.spec.timeout_s)
        with httpx.Client(
            timeout=timeout, follow_redirects=False, headers=headers, trust_env=False
        ) as client:
            # A few requests in flight: vLLM-style servers batch them on their side.
            workers = max(1, min(self.spec.max_concurrency, len(episodes)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                return list(pool.map(lambda ep: self.judge_one(client, ep), episodes))


@JUDGE_BACKENDS.register("openai")
def make_openai_judge(cfg: JudgeConfig, deps: JudgeDeps) -> OpenAIJudge:
    """allow-listed endpoint"""
    return OpenAIJudge(cfg, deps.endpoints)
