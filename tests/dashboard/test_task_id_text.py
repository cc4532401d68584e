"""A task id that no stored trajectory can hold (NUL, which PostgreSQL text cannot
store; a lone surrogate) in a page's path or query: a 404 or a 400 naming ``task``,
never a 500 (the endpoint fuzz found ``/runs/<id>/tasks/%00/`` on PostgreSQL)."""

from __future__ import annotations

import pytest
from dashtest import client_for

from dashboard.models import Run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("bad", ["%00", "a%00b", "%ED%A0%80"])
def test_a_task_id_no_column_can_hold_is_refused_not_a_500(owner, bad):
    a = Run.objects.create(owner=owner, name="a", config={}, external=True)
    b = Run.objects.create(owner=owner, name="b", config={}, external=True)
    c = client_for(owner)
    assert c.get(f"/runs/{a.pk}/tasks/{bad}/").status_code == 404
    if "%00" not in bad:
        return  # a query's invalid UTF-8 is read as U+FFFD: a task no run has
    for url in (
        f"/compare/task/?runs={a.pk},{b.pk}&task={bad}",
        f"/compare/?runs={a.pk},{b.pk}&task={bad}",
    ):
        r = c.get(url)
        assert r.status_code == 400, url
        assert "task: must not contain" in r.content.decode()
