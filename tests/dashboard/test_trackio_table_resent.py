"""TRL logs its completions table on every log call, and the call at the end of
training comes at the last step's global step: trackio's client sends the table
again with a new ``log_id``. The step held every rollout twice (a group of 2 became
a group of 4 with two copies). A table all of whose rows are stored at its step is
that table sent again, and is dropped; a table with any new row is kept."""

from __future__ import annotations

import uuid

import pytest

from dashboard.models import Run, Trajectory
from dashboard.site import tokens
from tests.dashboard.dashtest import trackio_bulk_log

pytestmark = pytest.mark.django_db

ROWS = [
    ("2+2?", "4", 1.0),
    ("2+2?", "five", 0.0),
    ("3+3?", "6", 1.0),
    ("3+3?", "6", 1.0),
]


def table(rows=ROWS, step=8):
    return {
        "_type": "trackio.table",
        "_value": [
            {"step": step, "prompt": p, "completion": c, "accuracy_reward": r}
            for p, c, r in rows
        ],
    }


@pytest.fixture
def send(owner):
    token = tokens.do_create_token(owner, f"t-{uuid.uuid4().hex[:6]}")[1]
    base = {"project": "resent", "run": "grpo", "run_id": uuid.uuid4().hex}

    def post(*metrics_of_entries):
        logs = [
            {**base, "metrics": m, "log_id": uuid.uuid4().hex}
            for m in metrics_of_entries
        ]
        trackio_bulk_log(token, logs)
        return Run.objects.get(external_id=base["run_id"])

    return post


def layout(run, step=8):
    rows = Trajectory.objects.filter(run=run, step=step).order_by("group", "index")
    return [(t.group, t.index) for t in rows]


def test_the_table_sent_again_at_its_step_is_stored_once(send):
    # Two identical rows in one table (two samples alike) are both kept.
    run = send({"train/reward": 0.5}, {"completions": table()})
    assert layout(run) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    send({"train/train_runtime": 12.0}, {"completions": table()})  # end of training
    assert layout(run) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_the_table_twice_in_one_call_is_stored_once(send):
    run = send({"completions": table()}, {"completions": table()})
    assert len(layout(run)) == 4


def test_a_table_with_a_new_row_at_the_step_is_kept(send):
    run = send({"completions": table()})
    send({"completions": table([*ROWS[:3], ("3+3?", "7", 0.0)])})
    assert len(layout(run)) == 8
