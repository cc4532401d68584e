"""Rough edges a newcomer hit (issue 11, item 13): cancel asks first and says what it
did, a 404 page with a way back, and a step that is not a number said so."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.models import Run
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _pages(settings):
    settings.DEBUG = False


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def swarm(owner):
    return seed_run(owner, name="swarm", env="swarm", steps=6, alert_every=5)


def test_cancel_is_a_question_first_not_a_one_click_submit(owner, swarm):
    Run.objects.filter(pk=swarm.pk).update(status="running")
    html = login(owner).get(f"/runs/{swarm.pk}/").content.decode()
    start = html.index("data-cancel-menu")
    menu = html[start : html.index("</details>", start)]
    # The visible control only opens the question; the submit button is inside it.
    assert '<summary class="button danger" data-cancel>' in menu
    assert 'type="submit" class="danger" data-cancel-confirm' in menu
    assert "Stop this run at its next step?" in menu
    assert html.count('type="submit" class="danger"') == 1


def test_cancelling_a_queued_run_says_it_will_not_start(owner, swarm):
    Run.objects.filter(pk=swarm.pk).update(status="queued", last_step=0)
    c = login(owner)
    assert "It will not start." in c.get(f"/runs/{swarm.pk}/").content.decode()
    html = c.post(f"/runs/{swarm.pk}/cancel/", follow=True).content.decode()
    assert "Cancelled before it started: nothing ran." in html
    assert "stops at its next step" not in html


def test_a_finished_run_offers_no_cancel(owner, swarm):
    html = login(owner).get(f"/runs/{swarm.pk}/").content.decode()
    assert "data-cancel-menu" not in html
    assert "data-cancel" not in html  # not even greyed out: the live page hides it


def test_the_404_page_has_the_site_navigation_and_a_way_back(owner):
    r = login(owner).get("/runs/00000000-0000-0000-0000-000000000000/")
    assert r.status_code == 404
    html = r.content.decode()
    assert 'class="topbar"' in html and 'nav aria-label="Main"' in html
    assert "data-not-found-links" in html and 'href="/runs/"' in html


def test_a_step_that_is_not_a_number_is_said_not_silently_replaced(owner, swarm):
    c = login(owner)
    html = c.get(f"/runs/{swarm.pk}/trajectories/?step=abc").content.decode()
    assert "“abc” is not a step number; showing step 6." in html
    html = c.get(f"/runs/{swarm.pk}/critical-path/?step=abc").content.decode()
    assert "“abc” is not a step number" in html
    html = c.get(f"/runs/{swarm.pk}/trajectories/?step=3").content.decode()
    assert "data-step-error" not in html


def test_cancelling_a_run_queued_again_after_its_steps_says_it_will_not_go_on(
    owner, swarm
):
    """A paused run (queued again at step 7) has run: "It will not start" and
    "Cancelled before it started: nothing ran" were not true of it."""
    Run.objects.filter(pk=swarm.pk).update(status="queued", last_step=7)
    c = login(owner)
    page = c.get(f"/runs/{swarm.pk}/").content.decode()
    assert "It is queued after step 7 and will not go on" in page
    assert "It will not start." not in page
    html = c.post(f"/runs/{swarm.pk}/cancel/", follow=True).content.decode()
    assert "Cancelled while queued after step 7" in html
    assert "nothing ran" not in html
