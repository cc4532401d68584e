"""The critical-path page says which rollout it draws and why (the rule the view
really applies), and labels every lane of its Gantt: the orchestrator, then sub-agent
k of each stage, stage numbers along the top, each sub-agent's subtask in its bar
(model-made text: escaped)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from dashboard.models import CriticalPath, Run
from dashboard.pages import gantt

HOSTILE = '<img src=x onerror="alert(1)">'


def _cp(group, index, stages, path, critical, total):
    return SimpleNamespace(
        group=group,
        index=index,
        stages=stages,
        path=path,
        critical_steps=critical,
        total_steps=total,
    )


def _subs(*steps, names="abcdef"):
    return [
        {"subtask": names[k], "steps": s, "success": True} for k, s in enumerate(steps)
    ]


def _serial(group, index):
    return _cp(group, index, [{"orchestrator_steps": 3, "subagents": []}], [None], 3, 3)


# --- which rollout, and why ------------------------------------------------------------
def test_the_default_is_the_largest_parallel_saving_and_says_so():
    small = _cp(0, 0, [{"orchestrator_steps": 1, "subagents": _subs(2, 1)}], [0], 3, 4)
    big = _cp(1, 1, [{"orchestrator_steps": 1, "subagents": _subs(4, 2, 1)}], [0], 5, 8)
    p = gantt.pick([_serial(0, 1), small, big], None, None)
    assert p.cp is big and p.how == "saving" and p.missing is None
    assert p.why == (
        "chosen by default as the rollout of this step whose sub-agents, run in "
        "parallel, saved the most steps (3 of its 8)"
    )


def test_a_tie_on_the_saving_is_broken_by_sub_agents_then_by_the_list_order():
    two = _cp(0, 0, [{"orchestrator_steps": 1, "subagents": _subs(2, 2)}], [0], 3, 5)
    three = _cp(0, 1, [(1, [2, 1, 1])], [0], 3, 5)  # the tuple spelling counts too
    p = gantt.pick([two, three], None, None)
    assert p.cp is three and (p.tied, p.tied_subs) == (1, 0)
    assert p.why.endswith("; 1 other saved as many: it has the most sub-agents (3)")
    twin = _cp(1, 0, [{"orchestrator_steps": 1, "subagents": _subs(2, 2)}], [0], 3, 5)
    p = gantt.pick([twin, two], None, None)
    assert (p.cp.group, p.cp.index) == (0, 0) and (p.tied, p.tied_subs) == (1, 1)
    assert p.why.endswith("; 1 other saved as many: it is the first listed")


def test_sub_agents_that_saved_nothing_and_a_serial_step_are_said_as_such():
    one = _cp(0, 0, [{"orchestrator_steps": 1, "subagents": _subs(2)}], [0], 3, 3)
    p = gantt.pick([_serial(0, 1), one], None, None)
    assert p.cp is one and p.how == "subagents"
    assert (
        "with the most sub-agents (1); none of its rollouts ran two side by side"
        in p.why
    )
    p = gantt.pick([_serial(1, 0), _serial(0, 1)], None, None)
    assert (p.cp.group, p.cp.index) == (0, 1) and p.how == "first"
    assert p.why == "the first listed, as no rollout of this step spawned sub-agents"


def test_the_rollout_asked_for_wins_and_a_missing_one_is_named():
    a, b = _serial(0, 0), _serial(0, 1)
    p = gantt.pick([a, b], 0, 1)
    assert p.cp is b and p.how == "asked" and p.why == "the rollout you chose"
    p = gantt.pick([a, b], 7, 3)
    assert p.cp is a and p.missing == (7, 3) and p.how == "first"
    assert gantt.pick([], 1, 1) == gantt.Pick(None, missing=(1, 1))


# --- the lanes -------------------------------------------------------------------------
def test_every_lane_has_a_label_and_every_stage_a_number():
    stages = [
        {"orchestrator_steps": 1, "subagents": _subs(5, 3, names=["a", HOSTILE])},
        (2, [1]),
    ]
    g = gantt.gantt(_cp(0, 0, stages, [0, 0], 9, 12))
    assert g.lane_labels() == ["orchestrator", "sub-agent 0", "sub-agent 1"]
    assert [(b.lane, b.stage, b.name, b.critical) for b in g.bars] == [
        (0, 0, "", True),
        (1, 0, "a", True),
        (2, 0, HOSTILE, False),
        (0, 1, "", True),
        (1, 1, "", True),
    ]
    assert [b.label for b in g.bars[1:3]] == [
        "stage 0, sub-agent 0 (a)",
        f"stage 0, sub-agent 1 ({HOSTILE})",
    ]
    assert [(m["stage"], m["shown"]) for m in g.stage_marks()] == [(0, True), (1, True)]
    # Lanes sit under the row of stage numbers, as the HTML labels beside them do.
    assert [r["y"] for r in g.rects()][:3] == [g.HEAD + 2, g.HEAD + 24, g.HEAD + 46]


def test_stage_numbers_that_would_crowd_are_left_out():
    g = gantt.gantt(_cp(0, 0, [(1, [])] * 200, [None] * 200, 200, 200))
    marks = g.stage_marks()
    shown = [m for m in marks if m["shown"]]
    assert len(marks) == 200 and 5 < len(shown) < 40 and shown[0]["stage"] == 0
    for a, b in zip(shown, shown[1:], strict=False):
        assert b["x"] - a["x"] >= 1 + g.DIGIT * len(str(a["stage"]))
    assert all(m["x"] + 1 + g.DIGIT * len(str(m["stage"])) <= 100 for m in shown)


# --- the page --------------------------------------------------------------------------


@pytest.fixture
def cp_run(owner):
    run = Run.objects.create(
        name="cp", owner=owner, config={"env": {"name": "swarm"}}, last_step=2
    )
    for group, index in ((0, 0), (0, 1), (1, 0)):
        CriticalPath.objects.create(
            run=run,
            step=2,
            group=group,
            index=index,
            stages=[{"orchestrator_steps": 3, "subagents": []}],
            critical_steps=3,
            total_steps=3,
            path=[None],
        )
    subs = [
        {"subtask": HOSTILE, "steps": 4, "success": True},
        {"subtask": "b", "steps": 2, "success": False},
    ]
    CriticalPath.objects.create(
        run=run,
        step=2,
        group=1,
        index=1,
        stages=[{"orchestrator_steps": 1, "subagents": subs}, [1, []]],
        critical_steps=6,
        total_steps=8,
        path=[0, None],
    )
    return run


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


@pytest.mark.django_db
def test_the_page_says_which_rollout_it_shows_and_why(owner_client, cp_run):
    html = owner_client.get(f"/runs/{cp_run.pk}/critical-path/").content.decode()
    line = re.search(r"<p[^>]*data-shown-pick[^>]*>(.*?)</p>", html, re.S).group(1)
    assert _text(line) == (
        "Showing step 2 (the run's latest), group 1, rollout 1: chosen by default as "
        "the rollout of this step whose sub-agents, run in parallel, saved the most "
        "steps (2 of its 8). Pick another rollout of step 2."
    )
    # The list marks the rollout drawn and says what each saved.
    row = re.search(r"<tr[^>]*data-shown-row[^>]*>(.*?)</tr>", html, re.S).group(1)
    assert 'class="shown-tag">shown<' in row and "index=1" in row
    assert html.count("data-shown-row") == 1 and ">saved</th>" in html

    asked = owner_client.get(f"/runs/{cp_run.pk}/critical-path/?step=2&group=0&index=1")
    text = _text(asked.content.decode())
    assert "Showing step 2, group 0, rollout 1: the rollout you chose." in text
    missing = owner_client.get(f"/runs/{cp_run.pk}/critical-path/?group=9&index=9")
    assert "Step 2 has no rollout group 9, rollout 9. Showing step 2" in _text(
        missing.content.decode()
    )


@pytest.mark.django_db
def test_the_lanes_are_labelled_and_the_subtasks_escaped(owner_client, cp_run):
    html = owner_client.get(f"/runs/{cp_run.pk}/critical-path/").content.decode()
    lanes = re.findall(r'<div data-lane="(\d)"[^>]*>([^<]*)</div>', html)
    assert lanes == [("0", "orchestrator"), ("1", "sub-agent 0"), ("2", "sub-agent 1")]
    assert re.findall(r'data-stage="(\d+)"', html) == ["0", "1"]
    # The stage's slowest sub-agent is marked; its subtask is text in its bar.
    crit = re.findall(r'<rect class="bar crit"[^>]*data-lane="1" data-critical>', html)
    assert len(crit) == 1
    assert HOSTILE not in html and "<img" not in html
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    assert (
        '<svg class="bar-label crit"' in html
        and '<svg class="bar-label failed"' in html
        and f'<text x="4" y="13">{escaped}</text>' in html
    )
    assert f"<title>stage 0, sub-agent 0 ({escaped}): 4 steps (critical: the" in html
