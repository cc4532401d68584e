"""The pages at scale: a run with 100k steps and 10k stored trajectories.

    python bench/ui_bench.py [--steps 100000] [--trajectories 10000] [--repeat 5]
                             [--no-browser]

Without ``DATABASE_URL`` it runs on the embedded configuration (SQLite in a temporary
directory); with it, on that PostgreSQL database (a throwaway user, deleted at exit).
Prints, never asserts:

* server time of each page (Django test client, median of ``--repeat``): the run page
  must open in under a second, the others too;
* the metrics API the run page's charts call (downsampled server side, 1000 points);
* in headless Chromium (when ``/usr/bin/chromium`` exists): time until the run page's
  charts are drawn, and the 4,000-token heatmap's render and recolour times.
"""

from __future__ import annotations

import argparse
import atexit
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "bench-password-1"


def embedded_env() -> Path | None:
    """Point the settings at a fresh SQLite database unless DATABASE_URL is set."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.pop("REDIS_URL", None)
    if os.environ.get("DATABASE_URL"):
        # The benchmark talks plain HTTP to a local server.
        for name in (
            "SECURE_SSL_REDIRECT",
            "SESSION_COOKIE_SECURE",
            "CSRF_COOKIE_SECURE",
        ):
            os.environ.setdefault(name, "0")
        os.environ.setdefault("SECRET_KEY", "ui-bench-" + "x" * 50)
        return None
    var = Path(tempfile.mkdtemp(prefix="ui-bench-"))
    atexit.register(shutil.rmtree, var, True)
    os.environ["DASHBOARD_VAR_DIR"] = str(var)
    return var


def load_metrics(run, steps: int, keys: list[str]) -> None:
    from django.db import connection, transaction

    from dashboard.ingest import writer
    from dashboard.models import MetricPoint, Run

    rng = random.Random(0)
    chunk = 5000
    run_id = Run._meta.pk.get_db_prep_value(run.pk, connection)
    table = MetricPoint._meta.db_table
    for lo in range(1, steps + 1, chunk):
        hi = min(lo + chunk, steps + 1)
        with transaction.atomic():
            if connection.vendor == "postgresql":
                points = {
                    (s, k): math.sin(s / 500 + i) + rng.random() * 0.1
                    for s in range(lo, hi)
                    for i, k in enumerate(keys)
                }
                writer.insert_metrics(run.pk, points)
            else:
                rows = [
                    (run_id, s, k, math.sin(s / 500 + i) + rng.random() * 0.1)
                    for s in range(lo, hi)
                    for i, k in enumerate(keys)
                ]
                with connection.cursor() as cur:
                    cur.executemany(
                        f"INSERT INTO {table} (run_id, step, key, value) VALUES (%s, %s, %s, %s)",
                        rows,
                    )


def load_trajectories(run, steps: int, count: int, per_step: int = 16) -> list[int]:
    from tests.fixtures import seed

    stored_steps = max(1, count // per_step)
    every = max(1, steps // stored_steps)
    chosen = [min(steps, 1 + i * every) for i in range(stored_steps)]
    rng, src = random.Random(1), seed.TextSource()

    def events():
        for step in chosen:
            for g in range(per_step // 4):
                for i in range(4):
                    yield from seed.trajectory_events(
                        step, g, i, run.config, rng, src, task=f"task-{step}-{g}"
                    )
            if step % (every * 50) == 1:
                yield {
                    "type": "alert",
                    "step": step,
                    "detector": "length_drift",
                    "severity": "warning",
                    "message": "completions are getting longer",
                    "evidence": {},
                }

    seed.write_events(run, events(), chunk=3000)
    return chosen


def timed(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def row(
    label: str, median_s: float, worst_s: float, goal_s: float, extra: str = ""
) -> None:
    verdict = "ok" if median_s <= goal_s else "SLOW"
    print(
        f"  {label:<46} {median_s * 1000:9.1f} ms  (worst {worst_s * 1000:7.1f})  goal < {goal_s * 1000:.0f} ms  {verdict}  {extra}"
    )


def server_side(
    client, run, small, steps_with_traj: list[int], big_traj: str, repeat: int
) -> None:
    from dashboard.pages.charts import run_charts

    mid = steps_with_traj[len(steps_with_traj) // 2]
    pages = {
        "run page /runs/<id>/": f"/runs/{run.pk}/",
        "runs list /runs/": "/runs/",
        "home /": "/",
        "trajectories of a step": f"/runs/{run.pk}/trajectories/?step={mid}",
        "trajectories, filtered": f"/runs/{run.pk}/trajectories/?step={mid}&sign=pos&reward_min=0",
        "one trajectory": f"/runs/{run.pk}/trajectories/{mid}/0/1/",
        "one trajectory, 4,000 tokens": big_traj,
        "critical path of a step": f"/runs/{run.pk}/critical-path/?step={mid}",
        "compare (the big run + another)": f"/compare/?runs={run.pk},{small.pk}",
        "new run form": "/runs/new/",
        "clone form": f"/runs/{run.pk}/clone/",
    }
    print("server time per page (HTML):")
    for label, url in pages.items():
        assert client.get(url).status_code == 200, url
        med, worst = timed(lambda url=url: client.get(url), repeat)
        size = len(client.get(url).content)
        row(label, med, worst, 1.0, f"{size / 1024:.0f} KiB")

    charts = run_charts(run.config)
    print(
        "chart data (platform API, one request per chart as the page does, 1000 points):"
    )
    per_chart = []
    for c in charts:
        url = f"/api/runs/{run.pk}/metrics?keys={','.join(c['keys'])}&points=1000"
        med, worst = timed(lambda url=url: client.get(url), max(1, repeat // 2))
        per_chart.append((med, worst, c["title"], len(c["keys"])))
    slow = max(per_chart)
    row(f"slowest chart: {slow[2][:22]} ({slow[3]} keys)", slow[0], slow[1], 1.0)
    total = sum(m for m, *_ in per_chart)
    print(f"  all {len(charts)} charts, one after another: {total * 1000:.0f} ms")
    one = f"/api/runs/{run.pk}/metrics?keys=reward&points=1000"
    row("metrics, 1 key (a chart)", *timed(lambda: client.get(one), repeat), 0.25)
    tail = f"/api/runs/{run.pk}/backfill?since_step={run.last_step - 100}"
    row(
        "backfill of the last 100 steps", *timed(lambda: client.get(tail), repeat), 0.25
    )


def browser_side(base: str, run, big_traj: str) -> None:
    from playwright.sync_api import sync_playwright

    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
    ]
    print("in the browser (headless Chromium):")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(base + "/accounts/login/")
        page.fill("#id_username", "ui-bench")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda u: "/login/" not in u)

        t0 = time.perf_counter()
        page.goto(f"{base}/runs/{run.pk}/")
        html_s = time.perf_counter() - t0
        while page.evaluate("() => document.body.dataset.chartsReady") != "1":
            page.wait_for_timeout(20)
        ready_s = time.perf_counter() - t0
        charts_ms = float(
            page.evaluate("() => document.body.dataset.chartsMs || 'NaN'")
        )
        first_ms = float(
            page.evaluate("() => document.body.dataset.firstChartMs || 'NaN'")
        )
        points = page.evaluate(
            "() => [...document.querySelectorAll('[data-chart]')].map(c => Number(c.dataset.points || 0))"
        )
        print(
            f"  run page loaded {html_s * 1000:.0f} ms; first chart drawn {first_ms:.0f} ms after "
            f"navigation, every chart {ready_s * 1000:.0f} ms (data fetch + draw {charts_ms:.0f} ms, "
            f"up to {max(points)} points per chart)"
        )
        lag = page.evaluate(
            "() => new Promise(r => { const t = performance.now(); requestAnimationFrame(() => r(performance.now() - t)); })"
        )
        print(
            f"  next animation frame after load: {lag:.1f} ms (responsive when < 50 ms)"
        )

        page.goto(base + big_traj)
        while page.evaluate("() => document.body.dataset.heatMs") is None:
            page.wait_for_timeout(20)
        tokens = page.evaluate("() => document.body.dataset.heatTokens")
        heat_ms = float(page.evaluate("() => document.body.dataset.heatMs"))
        recolour = page.evaluate(
            "() => { const t = performance.now(); const s = document.querySelector('[data-colour-by]');"
            " s.value = 'entropy'; s.dispatchEvent(new Event('change')); return performance.now() - t; }"
        )
        page.locator("[data-heat] span").nth(3000).hover()
        print(
            f"  heatmap of {tokens} tokens: rendered in {heat_ms:.1f} ms, recoloured in {recolour:.1f} ms "
            f"(goal < 100 ms: no visible freeze)"
        )
        browser.close()


def _seed_runs(user, args):
    """The 100k-step run (metrics and trajectories), a long trajectory, a small run
    and a runs list of more than one page; prints how long the loads took."""
    from django.db import connection

    from dashboard.models import Run
    from dashboard.pages.charts import run_charts
    from tests.fixtures import seed

    config = seed.valid_config("swarm", "dr_grpo", args.steps, name="bench 100k")
    run = Run.objects.create(
        owner=user, name="bench 100k", config=config, status="running"
    )
    keys = sorted({k for c in run_charts(config) for k in c["keys"]})
    t0 = time.perf_counter()
    load_metrics(run, args.steps, keys)
    t1 = time.perf_counter()
    steps_with_traj = load_trajectories(run, args.steps, args.trajectories)
    t2 = time.perf_counter()
    run.last_step = args.steps
    run.save(update_fields=["last_step"])
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("ANALYZE")
    big = seed.seed_run(
        user,
        name="long trajectory",
        env="search",
        steps=1,
        groups=1,
        group_size=1,
        tokens=4000,
    )
    small = seed.seed_run(user, name="small", env="swarm", steps=50, seed=3)
    for i in range(40):  # a runs list with more than one page of rows
        seed.seed_run(
            user,
            name=f"filler {i}",
            env="calc",
            steps=20,
            done=20,
            seed=i,
            groups=1,
            group_size=2,
            alert_every=0,
        )
    print(
        f"loaded {args.steps * len(keys):,} metric points in {t1 - t0:.1f}s, "
        f"{args.trajectories:,} trajectories (+ judgements, critical paths) in {t2 - t1:.1f}s"
    )

    return run, big, small, steps_with_traj


def _serve_and_browse(run, big_traj) -> None:
    """The pages in headless Chromium against a Daphne server of the same database."""
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(ROOT), "ALLOWED_HOSTS": "127.0.0.1,localhost"})
    port = 8700 + os.getpid() % 200
    proc = subprocess.Popen(
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
    try:
        import urllib.request

        base = f"http://127.0.0.1:{port}"
        for _ in range(150):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        browser_side(base, run, big_traj)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--trajectories", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()

    var = embedded_env()
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("migrate", interactive=False, verbosity=0)
    user = get_user_model().objects.create_user("ui-bench", password=PASSWORD)
    atexit.register(lambda: get_user_model().objects.filter(pk=user.pk).delete())
    print(
        f"database: {connection.vendor} ({'embedded, ' + str(var) if var else 'DATABASE_URL'})"
    )

    run, big, small, steps_with_traj = _seed_runs(user, args)
    client = Client(
        HTTP_HOST="localhost",
        **({"secure": True} if settings.SECURE_SSL_REDIRECT else {}),
    )
    client.force_login(user)
    big_traj = f"/runs/{big.pk}/trajectories/1/0/0/"
    server_side(client, run, small, steps_with_traj, big_traj, args.repeat)

    if args.no_browser or not os.path.exists(CHROMIUM):
        print(
            "browser part skipped"
            + ("" if args.no_browser else f": {CHROMIUM} is missing")
        )
        return
    _serve_and_browse(run, big_traj)


if __name__ == "__main__":
    main()
