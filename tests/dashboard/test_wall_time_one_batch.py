"""An external run whose events all arrived in one batch (an import, a short run sent
at its end) has no wall time to show: its first and last event came within a second,
which says nothing of how long it trained. The run page and compare say "—" with a
tooltip saying why, not "0s"."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Run
from dashboard.pages.templatetags.pages_tags import ONE_BATCH
from dashboard.site import tokens
from tests.dashboard.dashtest import trackio_bulk_log

pytestmark = pytest.mark.django_db

NO_TIME = f'<span class="muted" title="{ONE_BATCH}" data-one-batch>—</span>'


@pytest.fixture
def one_batch(owner):
    """A trackio run: 5 steps in one ``bulk_log``."""
    token = tokens.do_create_token(owner, "trackio")[1]
    run_id = uuid.uuid4().hex
    logs = [
        {
            "project": "one-batch",
            "run": "sent at its end",
            "run_id": run_id,
            "metrics": {"train/reward": 0.1 * s},
            "step": s,
            "log_id": uuid.uuid4().hex,
        }
        for s in range(5)
    ]
    trackio_bulk_log(token, logs)
    return Run.objects.get(external_id=run_id)


def test_a_run_sent_in_one_batch_shows_no_wall_time_on_its_page(
    one_batch, owner_client
):
    page = owner_client.get(f"/runs/{one_batch.pk}/")
    assert page.context["stats"].duration_s < 1
    html = page.content.decode()
    assert f'data-stat="duration">{NO_TIME}<' in html
    assert 'data-stat="duration">0s<' not in html


def test_compare_says_the_same_as_the_run_page(one_batch, owner, owner_client):
    ours = Run.objects.create(
        owner=owner, name="ours", config={"steps": 5}, status="succeeded",
        started_at=timezone.now() - timedelta(seconds=0.4), finished_at=timezone.now(),
    )  # fmt: skip
    html = owner_client.get(f"/compare/?runs={one_batch.pk},{ours.pk}").content.decode()
    summary = html[html.index("data-summary") : html.index("</table>")]
    sent, own = (summary[summary.index(f"/runs/{r.pk}/") :] for r in (one_batch, ours))
    assert f'<td class="num">{NO_TIME}</td>' in sent[: sent.index("</tr>")]
    # Ours ran for the 0.4 s it says: its clock is its own, not a batch's arrival.
    assert '<td class="num">0s</td>' in own[: own.index("</tr>")]


def test_a_run_that_sent_again_later_has_its_wall_time_back(one_batch, owner_client):
    Run.objects.filter(pk=one_batch.pk).update(
        heartbeat_at=one_batch.started_at + timedelta(seconds=42)
    )
    html = owner_client.get(f"/runs/{one_batch.pk}/").content.decode()
    assert 'data-stat="duration">42s<' in html and "data-one-batch" not in html


def test_a_finish_call_made_later_is_not_wall_time(one_batch, owner_client):
    # Its last event 42 s after the first; the finish call 11 minutes later.
    Run.objects.filter(pk=one_batch.pk).update(
        heartbeat_at=one_batch.started_at + timedelta(seconds=42),
        status="succeeded",
        finished_at=one_batch.started_at + timedelta(minutes=11),
    )
    html = owner_client.get(f"/runs/{one_batch.pk}/").content.decode()
    assert 'data-stat="duration">42s<' in html
