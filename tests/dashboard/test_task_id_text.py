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


def test_any_query_parameter_holding_nul_is_a_400_naming_it(owner):
    a = Run.objects.create(owner=owner, name="a", config={}, external=True)
    c = client_for(owner)
    r = c.get(f"/api/runs/{a.pk}/metrics?keys=%00")  # a 500 on PostgreSQL before
    assert r.status_code == 400
    assert r.json()["errors"] == ["keys: must not contain NUL characters"]
    r = c.get("/runs/?q=a%00&x%00y=1")
    assert r.status_code == 400 and "q: must not contain NUL" in r.content.decode()
    assert "x?y: must not contain NUL" in r.content.decode()
    r = c.get("/trackio/version?write_token=%00")
    assert (
        r.status_code == 200
        and "write_token: must not contain NUL" in r.json()["error"]
    )
    assert c.get(f"/api/runs/{a.pk}/metrics?keys=reward").status_code == 200
