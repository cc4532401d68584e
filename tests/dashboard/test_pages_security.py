"""Model-generated text is untrusted: every page shows the script-injection payloads
as text, carries a Content-Security-Policy without inline code, and contains no inline
script, event-handler attribute or style attribute of its own."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from django.test import Client

from dashboard.pages.csp import CSPMiddleware
from tests.fixtures.payloads import XSS_PAYLOADS
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


class Audit(HTMLParser):
    """Collects what a CSP without 'unsafe-inline' would refuse."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.json_blocks: list[str] = []
        self._in_json = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for name in a:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...>")
            if name == "style":
                self.problems.append(f"<{tag} style=...>")
        if tag == "script":
            if a.get("type") == "application/json":
                self._in_json = True
            elif not a.get("src"):
                self.problems.append("inline <script>")
        if tag in {
            "iframe",
            "object",
            "embed",
            "base",
            "frameset",
            "img",
            "video",
            "audio",
            "math",
        }:
            self.problems.append(f"unexpected <{tag}>")
        if tag == "a" and (a.get("href") or "").lower().startswith("javascript:"):
            self.problems.append("javascript: link")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_json = False

    def handle_data(self, data):
        if self._in_json:
            self.json_blocks.append(data)
        else:
            self.text.append(data)


def audit(html: str) -> Audit:
    a = Audit()
    a.feed(html)
    return a


@pytest.fixture
def hostile(owner):
    """Payloads in actions, tool output, sub-agent results, tokens, task ids, judge
    rationales, alert messages and the run's name."""
    run = seed_run(
        owner, name=XSS_PAYLOADS[0], env="swarm", steps=12, payloads=True, alert_every=2
    )
    other = seed_run(
        owner, name=XSS_PAYLOADS[1], env="swarm", steps=6, payloads=True, seed=3
    )
    return run, other


def _task_page(run) -> str:
    """A task's history: its prompt (model and dataset text) is shown by turn."""
    from urllib.parse import quote

    from dashboard.models import Trajectory

    t = Trajectory.objects.filter(run=run, step=4).order_by("group", "index").first()
    return f"/runs/{run.pk}/tasks/{quote(t.task_id, safe='')}/"


def pages(run, other):
    return [
        _task_page(run),
        "/",
        "/runs/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/trajectories/?step=4",
        f"/runs/{run.pk}/trajectories/4/0/1/",
        f"/runs/{run.pk}/trajectories/5/1/3/",
        f"/runs/{run.pk}/critical-path/?step=4",
        f"/runs/{run.pk}/clone/",
        f"/compare/?runs={run.pk},{other.pk}",
        "/runs/new/",
    ]


def test_every_page_shows_the_payloads_as_text_and_runs_none(owner, hostile):
    c = Client()
    c.force_login(owner)
    seen: set[str] = set()
    for url in pages(*hostile):
        r = c.get(url)
        assert r.status_code == 200, url
        html = r.content.decode()
        a = audit(html)
        assert a.problems == [], (url, a.problems[:5])
        text = "".join(a.text)
        for block in a.json_blocks:
            assert "<" not in block and ">" not in block, (
                url
            )  # json_script escapes them
            text += json.dumps(json.loads(block), ensure_ascii=False)
        seen.update(p for p in XSS_PAYLOADS if p in text)
    assert len(seen) >= 50, f"only {len(seen)} payloads reached the pages"


def test_every_page_has_a_strict_content_security_policy(owner, hostile):
    c = Client()
    c.force_login(owner)
    for url in pages(*hostile):
        csp = c.get(url)["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, url
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert "object-src 'none'" in csp and "frame-ancestors 'none'" in csp


def test_the_middleware_covers_other_html_pages_but_not_the_admin(rf):
    from django.http import HttpResponse

    mw = CSPMiddleware(lambda request: HttpResponse("<p>hi</p>"))
    assert (
        "script-src 'self'" in mw(rf.get("/accounts/login/"))["Content-Security-Policy"]
    )
    assert "Content-Security-Policy" not in mw(rf.get("/admin/"))


def test_the_login_page_gets_the_policy_too(client):
    r = client.get("/accounts/login/")
    assert "script-src 'self'" in r["Content-Security-Policy"]
