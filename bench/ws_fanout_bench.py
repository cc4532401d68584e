"""Websocket fan-out: many clients on one run's page, frames published at a fixed rate.

    DATABASE_URL=postgres://... REDIS_URL=redis://... SECRET_KEY=... \
        python bench/ws_fanout_bench.py [--clients 200] [--rate 20] [--seconds 60]

Starts Daphne (``dashboard.asgi``) in a subprocess, connects ``--clients`` websocket
clients with a real session cookie and Origin, and publishes numbered frames from
another subprocess through the production path (``frames.reserve_seq`` in Postgres,
``group_send`` on channels-redis). Each client measures publish-to-receive latency,
counts frames lost, and on a ``seq`` gap fetches ``/api/runs/<id>/backfill`` the way
the page does ("recovered" when that answers 200). Goals: p99 < 250 ms, no
unrecovered gap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

from _django import ROOT, new_run, percentile, setup


def publish(run_id: str, rate: float, seconds: float) -> None:
    """Child process: ``rate`` frames/s for ``seconds``, then a final frame."""
    setup_only()
    from dashboard.live import frames, streaming

    period, t0, n = 1.0 / rate, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        seq, _, _ = frames.reserve_seq(run_id)
        n += 1
        frame = {
            "type": "frame",
            "run": run_id,
            "seq": seq,
            "t_pub": time.time(),
            "steps": [{"step": n, "metrics": {"reward": 0.5}}],
        }
        streaming.publish(run_id, json.dumps(frame))
        time.sleep(max(0.0, t0 + n * period - time.perf_counter()))
    seq, _, _ = frames.reserve_seq(run_id)
    streaming.publish(
        run_id,
        json.dumps(
            {
                "type": "frame",
                "run": run_id,
                "seq": seq,
                "t_pub": time.time(),
                "final": True,
                "steps": [],
            }
        ),
    )
    print(json.dumps({"published": n + 1}), flush=True)


def setup_only() -> None:
    import django

    django.setup()


async def client(url, headers, http_base, cookie, run_id, stats, ready):
    import httpx
    from websockets.asyncio.client import connect

    latencies, received, gaps, recovered, last = [], 0, 0, 0, None
    async with connect(
        url, additional_headers=headers, open_timeout=60, max_queue=None
    ) as ws:
        json.loads(await ws.recv())  # hello
        ready.append(1)
        async with httpx.AsyncClient(
            base_url=http_base,
            cookies={"sessionid": cookie},
            headers={"Host": "127.0.0.1"},
        ) as http:
            while True:
                try:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                except TimeoutError:
                    break
                latencies.append(time.time() - frame["t_pub"])
                received += 1
                if last is not None and frame["seq"] != last + 1:
                    gaps += 1
                    r = await http.get(
                        f"/api/runs/{run_id}/backfill", params={"since_step": 0}
                    )
                    recovered += r.status_code == 200
                last = frame["seq"]
                if frame.get("final"):
                    break
    stats.append(
        {
            "latencies": latencies,
            "received": received,
            "gaps": gaps,
            "recovered": recovered,
        }
    )


def session_cookie(user) -> str:
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    s = SessionStore()
    s[SESSION_KEY] = str(user.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = user.get_session_auth_hash()
    s.create()
    return s.session_key


def _start_daphne(port: int, env: dict[str, str]) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "dashboard.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    for _ in range(150):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    return server


async def _fan_out(args, port, env, cookie, run_id, stats, ready) -> int:
    """Connect the clients, publish from a second process, return frames published."""
    base = f"http://127.0.0.1:{port}"
    headers = {"Cookie": f"sessionid={cookie}", "Origin": base}
    url = f"ws://127.0.0.1:{port}/ws/runs/{run_id}/"
    tasks = [
        asyncio.create_task(client(url, headers, base, cookie, run_id, stats, ready))
        for _ in range(args.clients)
    ]
    while len(ready) < args.clients:
        if all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.1)
    print(
        f"{len(ready)} clients connected; publishing {args.rate:g} frames/s for {args.seconds:g}s"
    )
    pub = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--publish",
        str(run_id),
        "--rate",
        str(args.rate),
        "--seconds",
        str(args.seconds),
        cwd=str(ROOT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await pub.communicate()
    await asyncio.gather(*tasks, return_exceptions=True)
    return json.loads(out.decode().strip().splitlines()[-1])["published"]


def _report(stats: list[dict], published: int, clients: int) -> None:
    lat = [x * 1000 for s in stats for x in s["latencies"]]
    lost = sum(published - s["received"] for s in stats) + published * (
        clients - len(stats)
    )
    gaps = sum(s["gaps"] for s in stats)
    unrecovered = gaps - sum(s["recovered"] for s in stats)
    print(
        f"clients {len(stats)}/{clients}, frames published {published}, delivered {len(lat):,}"
    )
    print(
        f"publish-to-receive latency p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms (goal p99 < 250 ms)"
    )
    print(
        f"frames lost {lost:,}; seq gaps {gaps}, unrecovered after backfill {unrecovered} (goal 0)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--publish", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.publish:
        return publish(args.publish, args.rate, args.seconds)
    if not os.environ.get("REDIS_URL"):
        sys.exit(
            "set REDIS_URL (and DATABASE_URL, SECRET_KEY): fan-out goes through channels-redis"
        )
    user = setup()
    run = new_run(user)
    cookie = session_cookie(user)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, ALLOWED_HOSTS="127.0.0.1,localhost", SECURE_SSL_REDIRECT="0")
    server = _start_daphne(port, env)
    stats: list[dict] = []
    ready: list[int] = []
    try:
        published = asyncio.run(_fan_out(args, port, env, cookie, run.id, stats, ready))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(15)
    _report(stats, published, args.clients)


if __name__ == "__main__":
    main()
