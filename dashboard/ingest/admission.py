"""How many ingest bodies this process decodes, parses and stores at once.

A body within every per-request limit still unfolds into much more memory than it
is: a prober's 87 KB gzip events body of 990,000 metric values cost ~75 MB to parse,
and eight at once +600 MB. So, process-wide, at most ``INGEST_MAX_CONCURRENT`` of
them (the events API's and trackio's, together) are in hand at once; a request
waits up to ``INGEST_QUEUE_WAIT_S`` seconds for a slot, then is refused with
:class:`Busy` (a 503 with ``Retry-After``: our ``HttpSink`` spools the batch and
sends it again, trackio's client keeps it in its local buffer and re-sends it).

The views take a slot after authentication and their cheap checks, around reading
the body through storing what it held, and give it back whatever happens::

    with admission.slot():
        ...decode, parse, store...

The limit is read at each wait, so a changed setting (``override_settings``) takes
effect at once. ``slot(pool="small")``: a second set of as many slots, for bodies
the view has held to a small size (trackio's alert batches of at most 64 KiB, which
its client never sends again once refused): they do not wait behind the big ones,
and are bounded all the same.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator

from django.conf import settings

from dashboard.errors import ServiceError

_cond = threading.Condition()
_held: dict[str, int] = {}


class Busy(ServiceError):
    """Every slot stayed taken for the whole wait: try again after ``retry_after``
    seconds (answered 503 with a ``Retry-After`` header)."""

    status = 503

    def __init__(self, limit: int, waited: float) -> None:
        self.retry_after = max(1, math.ceil(waited))
        self.headers = {"Retry-After": str(self.retry_after)}
        super().__init__(
            f"INGEST_MAX_CONCURRENT: the server is busy: {limit} ingest bodies (the "
            f"limit) are being processed already and none finished within "
            f"{waited:g} s (INGEST_QUEUE_WAIT_S); nothing was stored: send it again "
            f"after {self.retry_after} s"
        )


def limit() -> int:
    return max(1, int(settings.INGEST_MAX_CONCURRENT))


def held(pool: str = "bodies") -> int:
    """The slots of ``pool`` taken now."""
    with _cond:
        return _held.get(pool, 0)


def acquire(timeout: float, pool: str = "bodies") -> bool:
    """Takes a slot of ``pool``, waiting at most ``timeout`` seconds; False if none
    freed."""
    deadline = time.monotonic() + max(0.0, timeout)
    with _cond:
        while _held.get(pool, 0) >= limit():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _cond.wait(left)
        _held[pool] = _held.get(pool, 0) + 1
        return True


def release(pool: str = "bodies") -> None:
    with _cond:
        _held[pool] = max(0, _held.get(pool, 0) - 1)
        _cond.notify_all()


@contextlib.contextmanager
def slot(wait: float | None = None, pool: str = "bodies") -> Iterator[None]:
    """A slot of ``pool`` for the block, waiting up to ``wait``
    (``INGEST_QUEUE_WAIT_S``) for it; :class:`Busy` past that. Given back however
    the block ends."""
    waited = float(settings.INGEST_QUEUE_WAIT_S if wait is None else wait)
    if not acquire(waited, pool):
        raise Busy(limit(), waited)
    try:
        yield
    finally:
        release(pool)
