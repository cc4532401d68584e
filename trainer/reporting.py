"""Reporting a CLI run to a dashboard: the token, the remembered run, the spool.

``python -m trainer run --report-to URL --out DIR`` keeps the dashboard's run id in
``DIR/dashboard_run.json`` so that a resumed run (same ``--out``) reports into the same
dashboard run, and spools to ``DIR/spool/``. The token comes from ``DASHBOARD_TOKEN``,
read here at the edge (the trainer itself never reads the environment).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.httpsink import HttpSink

TOKEN_VAR = "DASHBOARD_TOKEN"
RUN_FILE = "dashboard_run.json"


class MissingToken(Exception):
    """No token in the environment: the CLI exits 2 with this message."""

    def __init__(self) -> None:
        super().__init__(
            f"--report-to needs an API token in the environment variable {TOKEN_VAR} "
            "(create one on the dashboard's /settings/tokens/ page or with "
            "`python manage.py create_token USERNAME`)"
        )


def token_from_env(environ: Mapping[str, str] | None = None) -> str:
    token = (os.environ if environ is None else environ).get(TOKEN_VAR, "").strip()
    if not token:
        raise MissingToken()
    return token


def remembered_run(out: Path | None, url: str) -> str | None:
    """The dashboard run id a previous run with this ``--out`` reported into."""
    if out is None or not (out / RUN_FILE).exists():
        return None
    try:
        data = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    except ValueError:
        return None
    if data.get("url") != url.rstrip("/"):
        return None  # another dashboard: a new run there
    return data.get("run_id")


def remember_run(out: Path, url: str, run_id: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (RUN_FILE + ".tmp")
    tmp.write_text(json.dumps({"url": url.rstrip("/"), "run_id": run_id}) + "\n")
    tmp.replace(out / RUN_FILE)


def run_reporter(
    url: str,
    token: str,
    *,
    out: Path | None,
    name: str,
    config: dict[str, Any],
    framework: str = "agentic-rl",
) -> HttpSink:
    """An :class:`HttpSink` for a CLI run, resuming the dashboard run of ``out``."""
    return HttpSink(
        url,
        token,
        remembered_run(out, url),
        name=name,
        framework=framework,
        config=config,
        spool_dir=(out / "spool") if out is not None else None,
        on_run_id=(lambda run_id: remember_run(out, url, run_id)) if out else None,
    )


def report_outcome(sink: HttpSink) -> str | None:
    """A line for the user when reporting failed, else None (after ``close``)."""
    if sink.error is None:
        return None
    return (
        f"warning: the dashboard at {sink.url} did not take this run: {sink.error}; "
        f"its events are kept in {sink.spool_dir}"
    )
