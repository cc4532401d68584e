"""The suite's recordings replayed as external runs through the events API.

Each recording becomes an external run (framework ``replay``: the server runs the
detectors, as for TRL or verl) whose config carries the run's own, and its steps are
sent as the trainer would send them, a few steps a batch, to ``POST
/api/runs/<id>/events``: each step's metrics, then one trajectory event per rollout
with the numbers the evidence reads (``metrics``), its reward, length, truncation and
success. The alerts the server stores are compared with those the trainer's monitor
raises over the same recording (``bench.hacking_measure.replay``): the same detectors
at the same steps, naming the same trajectories.

Needs Django: the database of ``DATABASE_URL``, else a throwaway SQLite file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH_STEPS = 5


def step_events(line: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One recorded step as the events a trainer sends: its metrics, its rollouts
    (with the per-episode values added since the recording, as a trainer sends
    them today)."""
    from bench.hacking_measure import row_numbers, step_summary, with_episode_means

    step = line["step"]
    metrics = with_episode_means(line["metrics"], step_summary(line))
    events: list[dict[str, Any]] = [{"type": "step", "step": step, "metrics": metrics}]
    for r in line["rows"]:
        n = row_numbers(r)
        events.append(
            {
                "type": "trajectory",
                "step": step,
                "group": r["g"],
                "index": r["i"],
                "task_id": r["task"],
                "reward": n.get("reward"),
                "length": int(n.get("length", 0)),
                "truncated": bool(n.get("truncated")),
                "facts": {"success": bool(n.get("success"))},
                "metrics": n,
                "steps": [
                    {"index": k, "action": a} for k, a in enumerate(r["actions"])
                ],
            }
        )
    return events


def batches(steps: Sequence[Mapping[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    for i in range(0, len(steps), BATCH_STEPS):
        yield [ev for line in steps[i : i + BATCH_STEPS] for ev in step_events(line)]


def _setup():
    if not os.environ.get("DATABASE_URL"):
        db = Path(tempfile.mkdtemp(prefix="hacking-suite-")) / "db.sqlite3"
        os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("SECRET_KEY", "dev")
    sys.path.insert(0, str(ROOT))
    from bench._django import setup

    return setup(require_postgres=False)


def server_alerts(client, user, meta: Mapping[str, Any], steps) -> list[tuple]:
    """``(step, detector, ((group, index), ...))`` of the alerts the server stores
    for the recording replayed as an external run."""
    from dashboard.models import Alert
    from dashboard.runs.external import do_create_external_run

    run = do_create_external_run(
        user,
        name=f"replay {meta['run']}",
        framework="replay",
        config={
            "env": {"name": meta["env"]},
            "reward": {"detectors": meta["detectors"]},
        },
    )
    for events in batches(steps):
        body = "".join(json.dumps(e) + "\n" for e in events)
        r = client.post(
            f"/api/runs/{run.pk}/events",
            body,
            content_type="application/x-ndjson",
            secure=True,
        )
        if r.status_code != 200:
            raise RuntimeError(f"{meta['run']}: {r.status_code} {r.content[:300]!r}")
    return [
        (a.step, a.detector, tuple((t["group"], t["index"]) for t in a.trajectories))
        for a in Alert.objects.filter(run=run).order_by("step", "detector")
    ]


def trainer_alerts(meta, steps) -> list[tuple]:
    from bench.hacking_measure import replay

    alerts = sorted(replay(meta, steps), key=lambda a: (a.step, a.detector))
    return [
        (a.step, a.detector, tuple((t.group, t.index) for t in a.trajectories))
        for a in alerts
    ]


def client_for(user):
    from django.test import Client

    from dashboard.site import tokens

    token = tokens.do_create_token(user, "hacking suite")[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="localhost")


def replay_dir(directory: Path, runs: Sequence[str]) -> bool:
    """Replay every recording through the events API; print and compare."""
    from bench.hacking_record import read_recording

    user = _setup()
    client = client_for(user)
    same = True
    print("\nreplayed through the events API (detectors on the server):")
    for run in runs:
        path = directory / f"{run}.jsonl.gz"
        if not path.exists():
            continue
        meta, steps, _ = read_recording(path)
        ours, theirs = (
            trainer_alerts(meta, steps),
            server_alerts(client, user, meta, steps),
        )
        ok = ours == theirs
        same &= ok
        print(
            f"  {run:24} trainer {len(ours)} alerts, server {len(theirs)}: "
            + ("the same" if ok else f"DIFFER: {ours} vs {theirs}")
        )
    return same
