"""The endpoints an administrator approves for OpenAI-compatible judges."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True)
class EndpointSpec:
    """One admin-approved endpoint. ``base_url`` ends before ``/chat/completions``
    (e.g. ``http://gpu-box:8000/v1``); ``timeout_s`` caps any judge's own timeout."""

    name: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    timeout_s: float = 60.0
    max_response_bytes: int = 1_000_000
    backoff_s: float = 0.5
    max_concurrency: int = 4

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"endpoint {self.name!r}: base_url must be http(s)://host/..."
            )
        limits = (self.timeout_s, self.max_response_bytes, self.max_concurrency)
        if not self.name or min(limits) <= 0 or self.backoff_s < 0:
            raise ValueError(
                f"endpoint {self.name!r}: needs a name and positive limits"
            )
