"""Server memory under concurrent oversized events bodies, with and without the cap.

    python bench/ingest_memory.py [--requests 8] [--caps 64,2] [--port 8141]

For each ``INGEST_MAX_CONCURRENT`` in ``--caps`` it starts the server on the embedded
default (a fresh ``DASHBOARD_VAR_DIR`` under the temp dir), creates an external run,
then posts ``--requests`` copies at once of an ~82 KB gzip NDJSON body of 5,000 step
events x 198 metrics (990,000 metric values: within every byte, line and JSON-value
limit, past ``EVENTS_MAX_METRIC_VALUES``, so each is refused with a 413 after parsing
what it must), and samples the server's RSS every 50 ms. Prints one JSON line per cap
(statuses, RSS before, peak, added MB) and the ratio of the added MB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) // 1024


def _post(port: int, token: str, path: str, body: bytes, **headers) -> int:
    headers = {"Authorization": f"Bearer {token}", **headers}
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=600) as f:
            return f.status if path.endswith("events") else json.loads(f.read())["id"]
    except urllib.error.HTTPError as e:
        return e.code


def body() -> bytes:
    metrics = {f"k{j}": 1.0 for j in range(198)}
    lines = "".join(
        json.dumps({"type": "step", "step": s, "metrics": metrics}) + "\n"
        for s in range(1, 5001)
    )
    return gzip.compress(lines.encode(), 9)


def measure(cap: int, requests: int, port: int, data: bytes) -> dict:
    var = Path(tempfile.mkdtemp(prefix="ingest-memory-"))
    env = dict(os.environ, DASHBOARD_VAR_DIR=str(var), SECRET_KEY="bench")
    env.update(INGEST_MAX_CONCURRENT=str(cap), INGEST_QUEUE_WAIT_S="60")
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    manage = [PY, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    make_token = (
        "from django.contrib.auth.models import User\n"
        "from dashboard.site import tokens\n"
        "u = User.objects.create_user('bench', password='x')\n"
        "print(tokens.do_create_token(u, 'bench')[1])"
    )
    token = subprocess.run(
        [*manage, "shell", "-c", make_token],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    server = subprocess.Popen(
        [*manage, "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                time.sleep(1)
        spec = {"name": "bench", "framework": "trl", "config": {}}
        run = _post(
            port, token, "/api/runs/external", json.dumps(spec).encode(),
            **{"Content-Type": "application/json"},
        )  # fmt: skip
        before = _rss_mb(server.pid)
        peak, statuses = [before], []

        def one() -> None:
            statuses.append(
                _post(
                    port,
                    token,
                    f"/api/runs/{run}/events",
                    data,
                    **{
                        "Content-Type": "application/x-ndjson",
                        "Content-Encoding": "gzip",
                    },
                )  # fmt: skip
            )

        threads = [threading.Thread(target=one) for _ in range(requests)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak[0] = max(peak[0], _rss_mb(server.pid))
            time.sleep(0.05)
        return {
            "cap": cap,
            "requests": requests,
            "statuses": sorted(statuses),
            "rss_before_mb": before,
            "rss_peak_mb": peak[0],
            "added_mb": peak[0] - before,
            "seconds": round(time.perf_counter() - t0, 1),
        }
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(var, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--caps", default="64,2")
    ap.add_argument("--port", type=int, default=8141)
    args = ap.parse_args()
    data = body()
    print(json.dumps({"body_bytes": len(data)}))
    out = [
        measure(int(c), args.requests, args.port, data) for c in args.caps.split(",")
    ]
    for row in out:
        print(json.dumps(row))
    if len(out) == 2 and out[1]["added_mb"]:
        print(
            json.dumps(
                {"added_ratio": round(out[0]["added_mb"] / out[1]["added_mb"], 1)}
            )
        )


if __name__ == "__main__":
    main()
