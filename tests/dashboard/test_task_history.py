"""A task's history (issue 12.3): one task id followed across a run's steps (its
group's mean and best reward and advantages per step, links to the rollouts), linked
from the group browser and the trajectory page, and the same task in two runs side
by side from compare."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.urls import reverse

from dashboard.ingest import writer
from dashboard.models import Run
from dashboard.reads import history as task_reads
from dashboard.runs import services

pytestmark = pytest.mark.django_db

TASK = 'calc-<b>"7"</b>'  # task ids come from environments and trainers: untrusted


def _traj(step, group, index, task, reward, advantage):
    return {
        "type": "trajectory",
        "step": step,
        "group": group,
        "index": index,
        "task_id": task,
        "reward": reward,
        "advantage": advantage,
        "length": 4,
        "segments": [{"kind": "action", "text": "x"}],
    }


# The task's group per step: (step, group, [(reward, advantage) per rollout]).
HISTORY = [
    (1, 1, [(0.0, -0.5), (1.0, 0.5)]),
    (3, 0, [(0.5, 0.0), (0.5, 0.0)]),  # equal rewards: no learning signal
    (5, 2, [(1.0, 0.25), (0.0, -0.75), (1.0, 0.25)]),
]


def _store(run, history=HISTORY, others=True):
    batch = writer.Batch()
    for step, group, rollouts in history:
        for i, (r, a) in enumerate(rollouts):
            batch.add(run.pk, _traj(step, group, i, TASK, r, a))
        if others:  # another task in the same step
            batch.add(run.pk, _traj(step, 0 if group else 1, 0, "other", 9.0, 0.0))
    writer.write(run.pk, batch)


@pytest.fixture
def runs(owner, tiny_config, enqueued):
    a = services.launch_run(owner, tiny_config)
    b = services.launch_run(owner, {**tiny_config, "name": "run B"})
    Run.objects.filter(pk__in=[a.pk, b.pk]).update(status="succeeded")
    _store(a)
    _store(b, [(2, 0, [(0.2, -0.1), (0.4, 0.1)])])
    return a, b


def _url(run, task=TASK):
    return reverse("pages:task_history", args=[run.pk, task])


def test_the_history_has_the_groups_mean_best_and_advantages_per_step(runs):
    history = task_reads.task_history(runs[0], TASK)
    assert [(h.step, h.group) for h in history] == [(1, 1), (3, 0), (5, 2)]
    assert [h.mean_reward for h in history] == [0.5, 0.5, pytest.approx(2 / 3)]
    assert [h.best_reward for h in history] == [1.0, 0.5, 1.0]
    assert [h.best.index for h in history] == [1, 0, 0]  # ties: the first rollout
    assert [h.advantages for h in history] == [
        [-0.5, 0.5],
        [0.0, 0.0],
        [0.25, -0.75, 0.25],
    ]
    assert [h.zero_variance for h in history] == [False, True, False]
    series = task_reads.series(history)
    assert series["mean_reward"]["step"] == [1, 3, 5]
    assert series["best_reward"]["last"] == [1.0, 0.5, 1.0]
    assert series["advantage_min"]["last"] == [-0.5, 0.0, -0.75]


def test_a_task_sampled_twice_in_one_step_shows_both_groups(owner, tiny_config):
    run = services.launch_run(owner, tiny_config)
    _store(run, [(1, 0, [(1.0, 0.0)]), (1, 3, [(0.0, 0.0)])], others=False)
    assert [(h.step, h.group) for h in task_reads.task_history(run, TASK)] == [
        (1, 0),
        (1, 3),
    ]


def test_the_task_page_charts_and_lists_each_step_with_links_to_the_rollouts(
    runs, owner_client
):
    run = runs[0]
    r = owner_client.get(_url(run))
    assert r.status_code == 200
    page = r.content.decode()
    # Every rollout of the task is one link, to its trajectory page, which exists.
    links = re.findall(r'href="([^"]+)" data-rollout-link', page)
    expected = [
        reverse("pages:trajectory", args=[run.pk, step, group, i])
        for step, group, rollouts in reversed(HISTORY)
        for i in range(len(rollouts))
    ]
    assert links == expected
    assert all(owner_client.get(u).status_code == 200 for u in links)
    best = re.findall(r'href="([^"]+)" data-best-link', page)
    assert best[0] == reverse("pages:trajectory", args=[run.pk, 5, 2, 0])
    assert "equal rewards" in page
    # The chart's data: the read's series, in a json_script block.
    block = re.search(r'id="task-data" type="application/json">(.*?)</script>', page)
    data = json.loads(unescape(block.group(1)))
    assert data["charts"][0]["series"]["mean_reward"]["step"] == [1, 3, 5]
    # The untrusted task id is escaped, in the page and in the data block.
    assert TASK not in page and "calc-&lt;b&gt;" in page


def test_the_group_browser_and_the_trajectory_page_lead_to_the_task(runs, owner_client):
    run = runs[0]
    for url in (
        reverse("pages:trajectories", args=[run.pk]) + "?step=5",
        reverse("pages:trajectory", args=[run.pk, 5, 2, 1]),
    ):
        page = owner_client.get(url).content.decode()
        assert f'href="{_url(run)}" data-task-link' in page.replace("&amp;", "&")


def test_a_task_the_run_never_recorded_and_another_users_run_are_404s(
    runs, owner_client, other
):
    assert owner_client.get(_url(runs[0], "nope")).status_code == 404
    from django.test import Client

    client = Client()
    client.force_login(other)
    assert client.get(_url(runs[0])).status_code == 404


def test_compare_leads_to_the_same_task_in_both_runs_side_by_side(runs, owner_client):
    a, b = runs
    ids = f"{a.pk},{b.pk}"
    page = owner_client.get(
        reverse("pages:compare"), {"runs": ids, "task": TASK}
    ).content.decode()
    link = re.search(r'href="([^"]+)" data-task-across-runs', page).group(1)
    r = owner_client.get(unescape(link))
    assert r.status_code == 200
    page = r.content.decode()
    block = re.search(r'id="task-data" type="application/json">(.*?)</script>', page)
    series = json.loads(unescape(block.group(1)))["charts"][0]["series"]
    assert series["run0"]["step"] == [1, 3, 5] and series["run1"]["step"] == [2]
    assert series["run1"]["last"] == [pytest.approx(0.3)]
    for run, steps in ((a, [5, 3, 1]), (b, [2])):
        column = page.split(f'data-task-column="{run.pk}"')[1].split("</section>")[0]
        assert [int(s) for s in re.findall(r'data-task-step="(\d+)"', column)] == steps


def test_compare_task_names_the_missing_field(runs, owner_client):
    a, b = runs
    r = owner_client.get(reverse("pages:compare_task"), {"runs": f"{a.pk},{b.pk}"})
    assert r.status_code == 400 and "task: pick a task id" in r.content.decode()
    r = owner_client.get(
        reverse("pages:compare_task"), {"runs": str(a.pk), "task": TASK}
    )
    assert r.status_code == 400 and "runs: pick between 2 and" in r.content.decode()
