"""The real ``trackio`` client (requirements-clients.txt), pointed at a test server with
``TRACKIO_SERVER_URL`` and nothing else: init, 20 logs, a table, a Trace, a system
sample, an alert, finish; the run, its metrics and its trajectories appear.

The client runs in a subprocess of an interpreter that has it: this one (CI installs
requirements-clients.txt into .venv), else ``.venv-clients/bin/python``; without
either the test is skipped with the reason."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dashboard.models import Alert, MetricPoint, Run, Trajectory
from dashboard.site import tokens

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def client_python() -> str:
    if importlib.util.find_spec("trackio") is not None:
        return sys.executable
    venv = ROOT / ".venv-clients" / "bin" / "python"
    if venv.exists():
        probe = subprocess.run([str(venv), "-c", "import trackio"], capture_output=True)
        if probe.returncode == 0:
            return str(venv)
    pytest.skip("trackio not installed (pip install -r requirements-clients.txt)")


def run_client(server_url: str, code: str, tmp_path: Path, timeout: float = 120):
    """Run ``code`` with trackio's client in a subprocess; its last stdout line is
    JSON."""
    env = dict(os.environ)
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(
        TRACKIO_SERVER_URL=server_url,
        TRACKIO_DIR=str(tmp_path / "trackio"),
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
    )
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(code))
    done = subprocess.run(
        [client_python(), str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done


CLIENT = """
import json
import trackio

run = trackio.init(project="grid-search", name="lr-0.1", config={"lr": 0.1, "seed": 3},
                   auto_log_cpu=False, auto_log_gpu=False)
for i in range(20):
    trackio.log({"loss": 1.0 / (i + 1), "reward": i / 20})
table = trackio.Table(
    columns=["prompt", "completion", "says_answer", "is_short", "advantage"],
    data=[["2+2?", "answer 4", 1.0, 1.0, 0.5], ["2+2?", "five", 0.0, 1.0, -0.5],
          ["3+3?", "answer 6", 1.0, 0.0, 0.0], ["3+3?", "answer 6!", 1.0, 0.0, 0.0]],
)
trackio.log({"completions": table})
trace = trackio.Trace(
    messages=[
        {"role": "system", "content": "You can search."},
        {"role": "user", "content": "Who wrote <b>Dune</b>?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "search", "arguments": "{\\"q\\": \\"Dune author\\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Frank Herbert"},
        {"role": "assistant", "content": "Frank Herbert."},
    ],
    metadata={"reward": 1.0, "advantage": 0.25, "model_version": "v3"},
)
trackio.log({"rollout": trace})
trackio.log_system({"cpu_percent": 12.5})
trackio.alert("reward collapsed", text="reward fell under 0.1", level=trackio.AlertLevel.WARN)
trackio.finish()
print(json.dumps({"run_id": run.id, "name": run.name}))
"""


@pytest.fixture
def token(owner):
    return tokens.do_create_token(owner, "trackio")[1]


def test_the_real_client_streams_a_run_its_metrics_and_trajectories(
    live_server, token, owner, tmp_path
):
    url = f"{live_server.url}/trackio/?write_token={token}"
    out, done = run_client(url, CLIENT, tmp_path)

    run = Run.objects.get(owner=owner, external_id=out["run_id"])
    assert (run.name, run.group, run.framework) == ("lr-0.1", "grid-search", "trackio")
    assert run.external and run.config == {"lr": 0.1, "seed": 3}
    loss = MetricPoint.objects.filter(run=run, key="loss").order_by("step")
    assert [p.step for p in loss] == list(range(20))
    assert loss[0].value == 1.0 and abs(loss[19].value - 1 / 20) < 1e-9

    table = Trajectory.objects.filter(run=run, step=20).order_by("group", "index")
    rows = [(t.group, t.index, t.reward, t.advantage) for t in table]
    assert rows == [
        (0, 0, 2.0, 0.5),
        (0, 1, 1.0, -0.5),
        (1, 0, 1.0, 0.0),
        (1, 1, 1.0, 0.0),
    ]
    assert table[0].rewards["components"] == {"says_answer": 1.0, "is_short": 1.0}

    (trace,) = Trajectory.objects.filter(run=run, step=21)
    assert (trace.reward, trace.advantage, trace.num_turns) == (1.0, 0.25, 2)
    assert trace.facts["model_version"] == "v3"
    assert MetricPoint.objects.filter(run=run, key="system/cpu_percent").exists()
    alert = Alert.objects.get(run=run)
    assert (alert.detector, alert.severity) == ("trackio:reward collapsed", "warning")
    assert "could not" not in done.stderr, done.stderr  # no warning from the client


def test_a_bad_write_token_is_printed_by_the_client(live_server, owner, tmp_path):
    url = f"{live_server.url}/trackio/?write_token=arl_not-a-token"
    code = """
    import json, trackio
    trackio.init(project="p", name="r", auto_log_cpu=False, auto_log_gpu=False)
    print(json.dumps({}))
    """
    _, done = run_client(url, code, tmp_path, timeout=60)
    assert "write_token: not a live API token" in done.stdout + done.stderr
    assert not Run.objects.exists()
