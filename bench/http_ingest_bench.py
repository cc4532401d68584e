"""Ingest over HTTP: metric points/s and trajectories/s through ``POST
/api/runs/{id}/events`` on Daphne + PostgreSQL, with concurrent senders.

    DATABASE_URL=postgres://... REDIS_URL=redis://... SECRET_KEY=... \
        python bench/http_ingest_bench.py [--senders 4] [--steps 4000] [--keys 50] \
        [--trajectories 1024] [--tokens 256] [--servers 1]

Each sender is a thread with its own external run and token-authenticated HTTP client,
posting gzip NDJSON batches the way ``trainer.httpsink.HttpSink`` does. Printed side
by side: the same events written in-process through ``dashboard.ingest.writer.store`` (the
write path both share), so the ratio is what HTTP, gzip, JSON parsing and the schema
check cost. Goal: at least 50k metric points/s on 2 cores.

The same metric points through trackio's endpoint (``POST /trackio/api/bulk_log``,
uncompressed JSON of ``--steps-per-batch`` entries, each a ``trackio.log`` call of
``--keys`` numbers, the way trackio's client sends its queue), one trackio run per
sender, with the same goal (``--only-trackio``: just that).

Then ``HttpSink``'s cost to a training run (``--sink-runs``): the tiny calc config
trained with ``JsonlSink`` alone and with ``JsonlSink`` + ``HttpSink`` to the same
server, alternated, whole-run wall times compared (medians), plus the time spent in
the trainer thread's ``emit`` calls. Goal: under 1%. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time

from _django import ROOT, setup
from ingest_bench import trajectory_events


def metric_batches(steps: int, keys: int, per_batch: int, offset: int = 0):
    names = [f"metric/{i}" for i in range(keys)]
    batch = []
    for step in range(1, steps + 1):
        batch.append(
            {
                "type": "step",
                "step": step,
                "metrics": {
                    k: math.sin(step + i + offset) for i, k in enumerate(names)
                },
            }
        )
        if len(batch) == per_batch:
            yield batch
            batch = []
    if batch:
        yield batch


def chunks(events, per_batch: int):
    batch = []
    for ev in events:
        batch.append(ev)
        if len(batch) == per_batch:
            yield batch
            batch = []
    if batch:
        yield batch


def encode(batch) -> bytes:
    return gzip.compress(
        "".join(json.dumps(e) + "\n" for e in batch).encode(), compresslevel=1
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_servers(n: int) -> tuple[list[subprocess.Popen], list[str]]:
    env = dict(os.environ)
    env.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    env["SECURE_SSL_REDIRECT"] = "0"  # plain HTTP on loopback
    env["LOG_LEVEL"] = "WARNING"
    procs, urls = [], []
    logs = ROOT / "var" / "bench"
    logs.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        port = free_port()
        log = (logs / f"http_ingest_server{k}.log").open("wb")
        print(f"server {k} logs to {log.name}")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                 "dashboard.asgi:application"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        port = int(url.rsplit(":", 1)[1])
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
    return procs, urls


def trackio_batches(steps: int, keys: int, per_batch: int, sender: int):
    """trackio ``bulk_log`` bodies: one entry a step, like its client's queue."""
    names = [f"metric/{i}" for i in range(keys)]
    run_id = f"bench{sender:04d}" + "0" * 24
    entries = []
    for step in range(1, steps + 1):
        entries.append(
            {
                "project": "bench", "run": f"trackio-{sender}", "run_id": run_id,
                "metrics": {k: math.sin(step + i + sender) for i, k in enumerate(names)},
                "step": step, "config": None, "log_id": f"{sender:04d}{step:028d}",
            }
        )  # fmt: skip
        if len(entries) == per_batch:
            yield json.dumps({"args": [], "kwargs": {"logs": entries}}).encode()
            entries = []
    if entries:
        yield json.dumps({"args": [], "kwargs": {"logs": entries}}).encode()


def events_target(http, i: int, name: str) -> tuple[str, dict[str, str]]:
    """Our events API: one external run per sender."""
    r = http.post(
        "/api/runs/external", json={"name": f"{name}-{i}", "framework": "bench"}
    )
    if r.status_code != 201:
        raise RuntimeError(f"create: {r.status_code} {r.text[:200]}")
    headers = {"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"}
    return f"/api/runs/{r.json()['id']}/events", headers


def trackio_target(token: str):
    def target(http, i: int, name: str) -> tuple[str, dict[str, str]]:
        headers = {"Content-Type": "application/json", "x-trackio-write-token": token}
        return "/trackio/api/bulk_log", headers

    return target


def send_all(urls, token, payloads_per_sender, name, target=events_target) -> float:
    """Post every payload, a sender a thread (``target`` says where, creating what
    it needs first); returns the wall time."""
    import httpx

    errors: list[str] = []

    def sender(i: int, payloads: list[bytes]) -> None:
        try:
            _send(i, payloads)
        except Exception as exc:
            errors.append(repr(exc))
            barrier.abort()

    def _send(i: int, payloads: list[bytes]) -> None:
        with httpx.Client(
            base_url=urls[i % len(urls)],
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        ) as http:
            path, headers = target(http, i, name)
            barrier.wait()
            for body in payloads:
                r = http.post(path, content=body, headers=headers)
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                if path.startswith("/trackio/") and r.json()["error"] is not None:
                    errors.append(r.json()["error"][:200])
                    return

    barrier = threading.Barrier(len(payloads_per_sender) + 1)
    threads = [
        threading.Thread(target=sender, args=(i, p))
        for i, p in enumerate(payloads_per_sender)
    ]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"{name}: {errors[0]}")
    return wall


def in_process(user, batches) -> float:
    from django.db import transaction

    from dashboard.ingest import writer
    from dashboard.runs.external import do_create_external_run

    run = do_create_external_run(user, name="inproc", framework="bench")
    t0 = time.perf_counter()
    for batch in batches:
        with transaction.atomic():
            writer.store(run.pk, batch, supersede_on_start=False)
    return time.perf_counter() - t0


class TimedEmit:
    """Counts the seconds the trainer thread spends handing events to ``inner``."""

    def __init__(self, inner) -> None:
        self.inner, self.seconds = inner, 0.0

    def emit(self, event) -> None:
        t0 = time.perf_counter()
        self.inner.emit(event)
        self.seconds += time.perf_counter() - t0

    def close(self) -> None:
        self.inner.close()


class TimedLines(TimedEmit):
    """The same for a sink that takes encoded lines (inside a ``TeeSink``)."""

    def emit_line(self, line) -> None:
        t0 = time.perf_counter()
        self.inner.emit_line(line)
        self.seconds += time.perf_counter() - t0


def sink_overhead(url: str, token: str, runs: int, steps: int, tmp: str) -> None:
    import statistics

    import torch

    from trainer import TrainConfig
    from trainer.events import JsonlSink, TeeSink
    from trainer.httpsink import HttpSink
    from trainer.runner import run_from_config

    torch.set_num_threads(1)
    cfg = TrainConfig.model_validate(
        {"env": {"name": "calc"}, "steps": steps, "seed": 0,
         "model": {"size": "tiny", "device": "cpu"},
         "rollout": {"tasks_per_step": 8, "group_size": 8}}
    )  # fmt: skip
    walls: dict[str, list[float]] = {"jsonl": [], "jsonl+http": []}
    emit_s: list[float] = []
    http_s: list[float] = []
    for i in range(runs):
        for kind in ("jsonl", "jsonl+http") if i % 2 == 0 else ("jsonl+http", "jsonl"):
            sinks = [JsonlSink(f"{tmp}/{kind}-{i}.jsonl")]
            http = None
            if kind == "jsonl+http":
                http = TimedLines(HttpSink(url, token, name=f"overhead-{i}",
                                           spool_dir=f"{tmp}/spool-{i}"))  # fmt: skip
                sinks.append(http)
            sink = TimedEmit(TeeSink(*sinks))
            t0 = time.perf_counter()
            run_from_config(cfg, sink)
            walls[kind].append(time.perf_counter() - t0)  # close() is after the run
            sink.close()
            if http is not None:
                emit_s.append(sink.seconds / walls[kind][-1])
                http_s.append(http.seconds / walls[kind][-1])
    a, b = statistics.median(walls["jsonl"]), statistics.median(walls["jsonl+http"])
    print(
        f"HttpSink on a training run ({steps} calc steps, 64 rollouts a step, {runs} runs each):"
    )
    print(
        f"  JsonlSink           median {a:.2f} s  {sorted(round(w, 2) for w in walls['jsonl'])}"
    )
    print(
        f"  JsonlSink+HttpSink  median {b:.2f} s  {sorted(round(w, 2) for w in walls['jsonl+http'])}"
    )
    print(f"  overhead {100 * (b / a - 1):+.1f}% of wall time; trainer thread in emit "
          f"{100 * statistics.median(emit_s):.2f}% (both sinks, one encoding), in "
          f"HttpSink {100 * statistics.median(http_s):.3f}%")  # fmt: skip


def trackio_rate(urls, token, args) -> None:
    per_sender = [
        list(trackio_batches(args.steps, args.keys, args.steps_per_batch, i))
        for i in range(args.senders)
    ]
    warm = [
        list(trackio_batches(2, args.keys, 1, 100 + i)) for i in range(args.senders)
    ]
    send_all(urls, token, warm, "trackio-warmup", trackio_target(token))
    wall = send_all(urls, token, per_sender, "trackio", trackio_target(token))
    points = args.senders * args.steps * args.keys
    print(
        f"trackio: {args.senders} clients x {args.steps} logs x {args.keys} keys "
        f"({args.steps_per_batch} entries a bulk_log), {args.servers} Daphne process(es)"
    )
    print(f"  /trackio/api/bulk_log {points / wall:10,.0f} points/s  ({wall:.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4000, help="steps per sender")
    ap.add_argument("--keys", type=int, default=50)
    ap.add_argument("--steps-per-batch", type=int, default=100)
    ap.add_argument(
        "--trajectories", type=int, default=1024, help="per sender; 0: skip"
    )
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--sink-runs", type=int, default=4, help="0: skip")
    ap.add_argument("--sink-steps", type=int, default=15)
    ap.add_argument("--only-sink", action="store_true")
    ap.add_argument("--only-trackio", action="store_true")
    args = ap.parse_args()
    user = setup()
    from dashboard.site import tokens

    token = tokens.do_create_token(user, "bench")[1]
    procs, urls = start_servers(args.servers)
    try:
        if args.sink_runs:
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                sink_overhead(urls[0], token, args.sink_runs, args.sink_steps, tmp)
        if args.only_sink:
            return
        trackio_rate(urls, token, args)
        if args.only_trackio:
            return
        per_sender = [
            [encode(b) for b in metric_batches(args.steps, args.keys, args.steps_per_batch, i)]
            for i in range(args.senders)
        ]  # fmt: skip
        points = args.senders * args.steps * args.keys
        send_all(urls, token, [p[:2] for p in per_sender], "warmup")
        wall = send_all(urls, token, per_sender, "metrics")
        batches = list(metric_batches(args.steps, args.keys, args.steps_per_batch))
        direct = in_process(user, batches)
        http_rate = points / wall
        direct_rate = args.steps * args.keys / direct
        print(
            f"metrics: {args.senders} senders x {args.steps} steps x {args.keys} keys "
            f"({args.steps_per_batch} steps a request), {args.servers} Daphne process(es)"
        )
        print(f"  HTTP      {http_rate:10,.0f} points/s  ({wall:.2f} s)")
        print(f"  in-process {direct_rate:9,.0f} points/s  (writer.store, one writer)")
        print(f"  HTTP / in-process = {http_rate / direct_rate:.2f}")

        if args.trajectories <= 0:
            return
        trajs = [
            [encode(b) for b in chunks(trajectory_events(args.trajectories, args.tokens), 64)]
            for _ in range(args.senders)
        ]  # fmt: skip
        wall = send_all(urls, token, trajs, "trajectories")
        direct = in_process(
            user, list(chunks(trajectory_events(args.trajectories, args.tokens), 64))
        )
        http_rate = args.senders * args.trajectories / wall
        direct_rate = args.trajectories / direct
        print(f"trajectories: {args.tokens} tokens each, 64 a request")
        print(f"  HTTP      {http_rate:10,.0f} trajectories/s  ({wall:.2f} s)")
        print(f"  in-process {direct_rate:9,.0f} trajectories/s")
        print(f"  HTTP / in-process = {http_rate / direct_rate:.2f}")
    finally:
        for p in procs:
            p.terminate()
        from dashboard.models import Run

        Run.objects.filter(owner=user).delete()


if __name__ == "__main__":
    main()
