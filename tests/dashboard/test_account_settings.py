"""``/settings/``: the webhook URL field (http(s) only, refused naming the field, the
form kept), saved per user, shown with the last delivery."""

from __future__ import annotations

import pytest

from dashboard.models import AccountSettings
from tests.dashboard.dashtest import client_for

pytestmark = pytest.mark.django_db


def save(client, url):
    return client.post("/settings/", {"webhook_url": url})


@pytest.mark.parametrize(
    "url, why",
    [
        ("ftp://hooks.example.org/x", "must start with http:// or https://"),
        ("javascript:alert(1)", "must start with http:// or https://"),
        ("hooks.example.org/x", "must start with http:// or https://"),
        ("http://", "must name a host"),
        ("https://user:pw@hooks.example.org/", "must not hold a user name"),
        ("https://hooks.example.org:99999/", "not a valid URL"),
        ("https://hooks.example.org/a b", "must not contain spaces"),
        ("https://h.example.org/" + "x" * 500, "at most 500 characters"),
    ],
)
def test_a_bad_url_is_refused_naming_the_field(owner, url, why):
    r = save(client_for(owner), url)
    assert r.status_code == 400
    html = r.content.decode()
    assert "webhook_url: " in html and why in html
    assert not AccountSettings.objects.filter(user=owner).exists()


def test_a_refused_url_stays_in_the_form_escaped(owner):
    r = save(client_for(owner), 'https://h.example.org/"><script>alert(1)</script> x')
    assert r.status_code == 400
    html = r.content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html


def test_a_good_url_is_saved_for_that_user_only(owner, other, settings):
    client = client_for(owner)
    r = save(client, "  https://hooks.example.org/rl?key=abc  ")
    assert r.status_code == 302 and r["Location"] == "/settings/"
    assert AccountSettings.objects.get(user=owner).webhook_url == (
        "https://hooks.example.org/rl?key=abc"
    )
    page = client.get("/settings/").content.decode()
    assert 'value="https://hooks.example.org/rl?key=abc"' in page
    assert "Webhook saved" in page
    assert 'value=""' in client_for(other).get("/settings/").content.decode()
    assert save(client, "http://[::ffff:127.0.0.1]:9000/hook").status_code == 400
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True  # a receiver on the server's network
    assert save(client, "http://127.0.0.1:9000/hook").status_code == 302
    assert save(client, "").status_code == 302  # empty: off
    assert AccountSettings.objects.get(user=owner).webhook_url == ""


def test_the_last_delivery_is_shown(owner):
    AccountSettings.objects.create(
        user=owner,
        webhook_url="https://hooks.example.org/",
        last_delivery={"at": "2026-01-02T03:04:05+00:00", "ok": False,
                       "error": "<urlopen error refused>", "detector": "length_drift",
                       "step": 7},
    )  # fmt: skip
    html = client_for(owner).get("/settings/").content.decode()
    assert "length_drift at step 7" in html
    assert "failed: &lt;urlopen error refused&gt;" in html and " ago)" in html


def test_settings_need_a_login():
    r = client_for(None).get("/settings/")
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]
