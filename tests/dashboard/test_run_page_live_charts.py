"""The run page is the part the live page takes its charts from when a frame brings a
metric name it has not seen (static/js/run_charts_live.js asks for the page again,
through static/js/run_parts.js): its ``page-data`` charts (the specs the script
builds charts from) and its chart sections (the markup it imports) must be the same
list, in the same order, for what the run has logged by then; only the run's owner
gets it, and a metric name in it is escaped."""

from __future__ import annotations

import html
import json
import re

import pytest
from dashtest import client_for

from dashboard.models import MetricPoint, Run
from dashboard.pages import reward_weights, run_state
from dashboard.pages.charts import extra_id
from dashboard.reads import reward_names
from dashboard.runs import external

pytestmark = pytest.mark.django_db

HOSTILE = "<img src=x onerror=alert(1)>/m"
SECTION = re.compile(
    r'<section class="panel chart" data-chart="([^"]*)" aria-labelledby="chart-\1-h"'
    r' aria-describedby="chart-\1-help">\s*<h3><span id="chart-\1-h">([^<]*)</span>'
)


def _page(user, run) -> str:
    r = client_for(user).get(f"/runs/{run.pk}/")
    assert r.status_code == 200
    return r.content.decode()


def _page_data(page: str) -> dict:
    m = re.search(
        r'<script id="page-data" type="application/json">(.*?)</script>', page
    )
    assert m
    return json.loads(m.group(1))


def _sections(page: str) -> list[tuple[str, str]]:
    return [(html.unescape(i), html.unescape(t)) for i, t in SECTION.findall(page)]


def _charts(user, run) -> list[tuple[str, str]]:
    """The page's charts as (id, title), checked to be the same in both places and
    to be :func:`reward_weights.run_charts` of what the run logged."""
    page = _page(user, run)
    specs = _page_data(page)["charts"]
    shown = [(c["id"], c["title"]) for c in specs]
    assert _sections(page) == shown
    run = Run.objects.get(pk=run.pk)
    keys = sorted(
        MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct()
    )
    want = run_state.with_stopped_text(
        reward_weights.run_charts(run, keys, reward_names.reward_key(run)), run
    )
    assert specs == json.loads(json.dumps(want))
    return shown


def _send(run, step: int, metrics: dict) -> None:
    external.do_ingest_events(run, [{"type": "step", "step": step, "metrics": metrics}])


def test_an_external_run_page_has_the_charts_of_what_it_sent_so_far(owner):
    run = external.do_create_external_run(owner, name="grows")
    assert _charts(owner, run) == []
    _send(run, 1, {"train/reward": 0.1, "train/loss": 1.0})
    assert _charts(owner, run) == [("reward", "Reward"), ("extra-train", "train/")]
    _send(
        run,
        2,
        {
            "train/reward": 0.2,
            "critic/vf_loss": 3.0,
            "rewards/foo/mean": 0.4,
            "eval/reward": 0.6,
            HOSTILE: 1.5,
        },
    )
    charts = _charts(owner, run)
    # By prefix, not place: "train/" keeps its id (and its log-scale choice) when
    # prefixes sorted before it arrive; a client's odd prefix by a hash.
    hostile = extra_id("<img src=x onerror=alert(1)>", 0)
    assert hostile.startswith("extra-x-")
    assert [c[0] for c in charts] == [
        "reward",
        "components",
        "eval",
        hostile,
        "extra-critic",
        "extra-train",
    ]
    assert charts[3] == (hostile, "<img src=x onerror=alert(1)>/")
    assert charts[5] == ("extra-train", "train/")
    page = _page(owner, run)
    assert "<img" not in page.split("data-charts")[1].split("data-histogram")[0]
    # Nor in the specs the script reads (json_script escapes <, > and &).
    assert "<img" not in page.split('id="page-data"')[1].split("</script>")[0]
    _send(run, 3, {"rewards/bar/mean": 0.1})
    spec = next(
        c for c in _page_data(_page(owner, run))["charts"] if c["id"] == "components"
    )
    assert spec["keys"] == ["rewards/bar/mean", "rewards/foo/mean"]


def test_our_run_page_gains_a_family_chart_once_it_logs_one(owner, tiny_config):
    run = Run.objects.create(owner=owner, name="ours", config=tiny_config, last_step=1)
    MetricPoint.objects.create(run=run, step=1, key="reward", value=0.5)
    before = _charts(owner, run)
    assert before and "staleness" not in dict(before)
    MetricPoint.objects.create(
        run=run, step=2, key="off_policy/versions_behind", value=1.0
    )
    after = _charts(owner, run)
    assert after[: len(before)] == before
    assert dict(after)["staleness"] == "Staleness (policy versions behind)"


def test_only_the_owner_gets_the_charts(owner, other, tiny_config):
    theirs = external.do_create_external_run(owner, name="not yours")
    _send(theirs, 1, {"reward": 0.5})
    ours = Run.objects.create(owner=owner, name="ours", config=tiny_config)
    for run in (theirs, ours):
        assert client_for(other).get(f"/runs/{run.pk}/").status_code == 404
        assert client_for(None).get(f"/runs/{run.pk}/").status_code in (302, 404)
