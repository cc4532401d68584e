"""Browser tests: a real Daphne server (HTTP + websockets) in a subprocess, headless
Chromium driven by Playwright.

The server runs the embedded configuration whatever the environment says (no
``DATABASE_URL``/``REDIS_URL``: SQLite in a temporary directory, the in-memory channel
layer, runs executed in-process), so the tests need nothing but Chromium. Data is
seeded through the same settings by short subprocesses (``tests.fixtures.seed``).
Screenshots go to ``$ARTIFACTS_DIR/screenshots`` (default ``artifacts/screenshots``).

Every page is opened with ``dialog`` and ``securitypolicyviolation`` hooks: a
script-injection payload that ran would show up in ``page_guard.dialogs`` and a blocked
one in ``page_guard.violations``; both must stay empty.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
PASSWORD = "pw-browser-123"


def pytest_collection_modifyitems(config, items):
    reasons = []
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        reasons.append(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reasons.append("playwright is not installed")
    if not reasons:
        return
    skip = pytest.mark.skip(reason="; ".join(reasons))
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_STARTED: list[Server] = []

# Cancels what is still queued or running and waits for the trainer to stop: a run a
# test module left behind would otherwise train on, in the session's server, for the
# rest of the session (on 2 cores, starving the later tests' servers).
_STOP_LEFTOVERS = """
import time
from datetime import timedelta
from django.utils import timezone
from dashboard.runs import services
from dashboard.models import ACTIVE_STATUSES, Run, RunStatus
for run in Run.objects.filter(status__in=ACTIVE_STATUSES, external=False):
    try:
        services.cancel_run(run)
    except services.Conflict:
        pass
# A run a test set to running by hand has no trainer (no heartbeat): end it here.
Run.objects.filter(status=RunStatus.RUNNING, external=False).exclude(
    heartbeat_at__gte=timezone.now() - timedelta(seconds=15)
).update(status=RunStatus.CANCELLED, finished_at=timezone.now())
deadline = time.monotonic() + {timeout}
running = Run.objects.filter(status=RunStatus.RUNNING, external=False)
while time.monotonic() < deadline and running.exists():
    time.sleep(0.5)
print(json.dumps(list(running.values_list("name", flat=True))))
"""


class Server:
    """A Daphne subprocess over its own SQLite database."""

    def __init__(
        self,
        var_dir: Path,
        trainer: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.var_dir = var_dir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL")
        }
        env.update(
            {
                "DASHBOARD_VAR_DIR": str(var_dir),
                "DJANGO_SETTINGS_MODULE": "dashboard.settings",
                "PYTHONPATH": str(ROOT),
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "RUN_HEARTBEAT_SECONDS": "1",
                "RUN_FRAME_INTERVAL_MS": "100",
                "RUN_MAX_ACTIVE_PER_USER": "20",
                "LOG_LEVEL": "WARNING",
            }
        )
        if trainer:
            env["RUN_TRAINER"] = trainer
        env.update(extra_env or {})
        self.env = env
        self.log = (var_dir / "server.log").open("w")
        self.proc: subprocess.Popen | None = None

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-4000:]
        return out.stdout

    def script(self, code: str) -> object:
        """Run Python against the server's database; returns the JSON it prints last."""
        prelude = (
            "import os, django\n"
            "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'dashboard.settings')\n"
            "django.setup()\nimport json\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", prelude + code],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-4000:]
        lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
        return json.loads(lines[-1]) if lines else None

    def start(self) -> Server:
        self.manage("migrate", "--noinput", "-v", "0")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "dashboard.asgi:application",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + self.logs())
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1)
                _STARTED.append(self)
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("server did not start:\n" + self.logs())

    def logs(self) -> str:
        self.log.flush()
        return (self.var_dir / "server.log").read_text()[-8000:]

    def stop_leftover_runs(self, timeout: float = 120) -> list[str]:
        """Cancel every unfinished run of ours; the names of those still running after
        ``timeout`` seconds (a cancel that was not honoured)."""
        if not self.proc or self.proc.poll() is not None:
            return []
        if not self._has_active_runs():
            return []  # nothing to cancel: no Django process to start (seconds each)
        return self.script(_STOP_LEFTOVERS.format(timeout=timeout))

    def _has_active_runs(self) -> bool:
        """Whether the server's database holds a queued or running run of ours, read
        straight from its SQLite file."""
        from dashboard.models import ACTIVE_STATUSES, Run

        db = self.var_dir / "dashboard.sqlite3"
        with contextlib.closing(
            sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        ) as c:
            marks = ",".join("?" * len(ACTIVE_STATUSES))
            (count,) = c.execute(
                f"SELECT COUNT(*) FROM {Run._meta.db_table} "
                f"WHERE status IN ({marks}) AND NOT external",
                [str(status) for status in ACTIVE_STATUSES],
            ).fetchone()
        return count > 0

    def stop(self) -> None:
        if self in _STARTED:
            _STARTED.remove(self)
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
        self.log.close()


@pytest.fixture(scope="module", autouse=True)
def _no_runs_left_behind():
    """After each module: nothing of its runs keeps training in a session server."""
    yield
    stuck = {s.url: s.stop_leftover_runs() for s in list(_STARTED)}
    stuck = {url: names for url, names in stuck.items() if names}
    assert not stuck, f"runs still running after their cancel: {stuck}"


@pytest.fixture(scope="module")
def seeded_runs(live):
    """Ids of runs a module seeded on the session's ``live`` server, deleted when the
    module ends: a long word in a seeded run's name widens the runs list's name
    column, and the modules after it on that server (test_browser_layout_fit) expect
    the runs they made themselves."""
    ids: list[str] = []
    yield ids
    if ids:
        live.script(
            "from dashboard.models import Run\n"
            f"Run.objects.filter(pk__in={ids!r}).delete()\n"
            "print(json.dumps('ok'))\n"
        )


def _users(server: Server) -> None:
    server.script(
        "from django.contrib.auth import get_user_model\n"
        "U = get_user_model()\n"
        f"for name in ('alice', 'mallory'): U.objects.create_user(name, password={PASSWORD!r})\n"
        "print(json.dumps('ok'))\n"
    )


@pytest.fixture(scope="session")
def live(tmp_path_factory):
    """Runs train for real (``trainer.runner.run_from_config``), on CPU."""
    s = Server(tmp_path_factory.mktemp("server")).start()
    _users(s)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def roots_live(tmp_path_factory):
    """The real trainer, with MODEL_ROOTS and DATA_ROOTS pointed at their own
    temporary directories (``server.model_root``, ``server.data_root``)."""
    base = tmp_path_factory.mktemp("roots")
    models, data = base / "models", base / "data"
    for d in (models, data, base / "server"):
        d.mkdir()
    s = Server(
        base / "server",
        extra_env={"MODEL_ROOTS": str(models), "DATA_ROOTS": str(data)},
    )
    s.model_root, s.data_root = models, data
    s.start()
    _users(s)
    yield s
    s.stop()


def _played_by(tmp_path_factory, name: str, trainer: str) -> Server:
    """A started server whose runs ``trainer`` (a ``RUN_TRAINER`` stand-in) plays."""
    s = Server(tmp_path_factory.mktemp(name), trainer=trainer).start()
    _users(s)
    return s


@pytest.fixture(scope="session")
def scripted_live(tmp_path_factory):
    """Runs are played by ``tests.fixtures.scripted.scripted_trainer``: every step's text
    is a script-injection payload, streamed over the websocket."""
    s = _played_by(
        tmp_path_factory, "scripted", "tests.fixtures.scripted.scripted_trainer"
    )
    yield s
    s.stop()


@pytest.fixture(scope="session")
def repair_live(tmp_path_factory):
    """Runs are played by ``tests.fixtures.hacked.repaired_trainer``: a repair clone
    trains as the repaired policy would, through the platform's sink."""
    s = _played_by(tmp_path_factory, "repair", "tests.fixtures.hacked.repaired_trainer")
    yield s
    s.stop()


# One browser a test module: Playwright's sync API runs an event loop in this thread
# while it is open, and Django refuses database calls where a loop runs. Run in
# parallel (``make test``'s pytest-xdist), a worker that has run a browser module
# goes on to the platform's tests, which would all fail with a session's browser open.
@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    base = Path(os.environ.get("ARTIFACTS_DIR") or (ROOT / "artifacts"))
    path = base / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


class Guard:
    """Collects what must not happen on a page: dialogs, CSP violations, JS errors."""

    def __init__(self, page) -> None:
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.add_init_script(
            "window.__cspViolations = [];"
            "document.addEventListener('securitypolicyviolation',"
            " e => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        self.page = page

    def _dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def violations(self) -> list[str]:
        try:
            return self.page.evaluate("window.__cspViolations || []")
        except Exception:
            return []

    def check(self) -> None:
        assert self.dialogs == [], f"a script ran: {self.dialogs}"
        assert self.violations() == [], f"CSP blocked something: {self.violations()}"
        assert self.errors == [], f"JavaScript errors: {self.errors}"


def login(page, base_url: str, username: str = "alice") -> None:
    page.goto(base_url + "/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture
def page(browser, request, shots):
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = context.new_page()
    pg.guard = Guard(pg)
    pg.set_default_timeout(20_000)
    yield pg
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        try:
            pg.screenshot(
                path=str(shots / f"FAILED_{request.node.name}.png"), full_page=True
            )
            (shots / f"FAILED_{request.node.name}.txt").write_text(
                f"{pg.url}\n{pg.guard.errors}\n{pg.guard.dialogs}\n"
            )
        except Exception:
            pass
    context.close()


def shot(page, shots: Path, name: str, full: bool = True) -> Path:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    return path


def until(page, expression: str, timeout: float = 30.0, interval: float = 0.2):
    """Poll a JavaScript expression until it is truthy; returns its value.

    ``page.wait_for_function`` evaluates strings in the page, which the pages' CSP
    (no 'unsafe-eval') refuses; ``page.evaluate`` goes through the DevTools protocol.
    """
    import time as _time

    deadline = _time.monotonic() + timeout
    last = None
    while _time.monotonic() < deadline:
        try:
            last = page.evaluate(f"() => ({expression})")
        except Exception as exc:  # navigating: the context is being replaced
            last = exc
        if last and not isinstance(last, Exception):
            return last
        page.wait_for_timeout(interval * 1000)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {expression!r} (last: {last!r})"
    )


@contextlib.contextmanager
def signed_in(browser, live, width: int, height: int = 900):
    """A signed-in page ``width`` px wide on ``live``, its console guarded (checked
    when the block ends without an error); its context closed after."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        page.guard = Guard(page)
        page.set_default_timeout(20_000)
        login(page, live.url)
        yield page
        page.guard.check()
    finally:
        context.close()


def new_token(page, base: str, name: str = "") -> str:
    """Signs ``page`` in on ``base`` and makes an API token on the tokens page, as a
    user does; returns it (``arl_...``)."""
    import uuid as _uuid

    login(page, base)
    page.goto(base + "/settings/tokens/")
    page.fill("input[name=name]", name or f"token-{_uuid.uuid4().hex[:6]}")
    page.click("button[type=submit].primary")
    return page.inner_text("[data-new-token]").strip()


def trackio_sender(page, base: str, project: str):
    """Signs ``page`` in and makes a token; returns ``send(name, step, reward=None,
    metrics=None)``, which sends one ``bulk_log`` of run ``name`` of ``project`` as
    trackio's client does (``train/reward``: ``reward``, else 0.1 x step; NaN sent as
    NaN; or ``metrics``) and returns the run's id. ``step`` may be a list: those
    steps in the one batch."""
    import uuid as _uuid

    import httpx

    token = new_token(page, base)
    client = httpx.Client(
        base_url=base + "/trackio/",
        headers={"x-trackio-write-token": token},
        timeout=30,
    )
    api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"})
    ids: dict[str, str] = {}

    def entry(name: str, step: int, reward: float | None, metrics: dict | None):
        reward = 0.1 * step if reward is None else reward
        return {
            "project": project, "run": name, "run_id": ids[name], "step": step,
            "log_id": _uuid.uuid4().hex, "config": {"lr": 1e-5} if step == 0 else None,
            "metrics": metrics or {"train/reward": reward, "train/loss": 1 / (step + 1)},
        }  # fmt: skip

    def send(name: str, step, reward=None, metrics: dict | None = None) -> str:
        ids.setdefault(name, _uuid.uuid4().hex)
        steps = step if isinstance(step, list) else [step]
        logs = [entry(name, s, reward, metrics) for s in steps]
        body = json.dumps({"args": [], "kwargs": {"logs": logs}})
        r = client.post(
            "api/bulk_log", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 200 and r.json()["error"] is None, r.text
        runs = api.get(f"/api/runs?group={project}").json()["runs"]
        return next(r["id"] for r in runs if r["name"] == name)

    return send


class UI:
    """The helpers above, as a fixture (test modules never import ``conftest``: with
    several conftest.py files on the path, the name is ambiguous)."""

    login = staticmethod(login)
    shot = staticmethod(shot)
    until = staticmethod(until)
    signed_in = staticmethod(signed_in)
    new_token = staticmethod(new_token)
    trackio_sender = staticmethod(trackio_sender)
    Guard = Guard


@pytest.fixture
def ui() -> type[UI]:
    return UI


@pytest.fixture(scope="module")
def out_dir() -> Path:
    """Where the layout tests' screenshots go (``LAYOUT_SHOTS``)."""
    path = Path(os.environ.get("LAYOUT_SHOTS") or "/tmp/layout-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path
