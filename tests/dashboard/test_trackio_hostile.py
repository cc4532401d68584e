"""/trackio/ ``bulk_log`` under hostile entries: never a 500 (trackio's client sends a
batch answered 500 again, forever), always the documented 200 ``{"error"}`` naming the
field, or the entry stored with its text repaired (a lone surrogate becomes ``?``, as
:func:`dashboard.jsonsafe.clean` repairs stored text)."""

from __future__ import annotations

import hashlib
import logging
import uuid

import pytest

from dashboard.models import EntryReceipt, MetricPoint, Run, Trajectory
from trainer.importers import trackio as convert
from trainer.importers.shapes import task_id_for

pytestmark = pytest.mark.django_db
LONE = "\ud800"  # json.dumps writes it as the escape "\\ud800", as a client would


def entry(metrics, step=1, **extra):
    return {
        "project": "proj",
        "run": "r1",
        "run_id": "rid",
        "metrics": metrics,
        "step": step,
        "config": None,
        "log_id": uuid.uuid4().hex,
        **extra,
    }


def table(*rows):
    return {"_type": "trackio.table", "_value": list(rows)}


def row(**cells):
    return {"step": 3, "prompt": "2+2?", "completion": "4", "says": 1.0, **cells}


def trace(messages, **meta):
    return {"_type": "trackio.trace", "messages": messages, "metadata": meta}


def chat(role="user", content="Who wrote Dune?"):
    return [{"role": role, "content": content}, {"role": "assistant", "content": "A"}]


def assert_refused(answer, error):
    assert answer["data"] is None
    assert answer["error"].startswith(error), answer["error"]
    assert not Run.objects.exists() and not EntryReceipt.objects.exists()


# --- text no column stores: repaired, as stored text is ---------------------------------
def test_a_lone_surrogate_log_id_is_stored_repaired_and_a_resend_is_a_duplicate(
    bulk_log,
):
    sent = entry({"loss": 0.5}, log_id=LONE)
    assert bulk_log(sent) == {"data": {"accepted": 1, "duplicates": 0}, "error": None}
    assert list(EntryReceipt.objects.values_list("key", flat=True)) == ["?"]
    again = bulk_log(sent)["data"]
    assert again == {"accepted": 0, "duplicates": 1}


def test_a_lone_surrogate_in_a_system_sample_is_repaired(bulk_log):
    sent = entry({f"gpu{LONE}": 3.0}, log_id=f"id{LONE}")
    assert bulk_log(sent, name="bulk_log_system")["error"] is None
    assert MetricPoint.objects.get().key == "system/gpu?"


def test_a_lone_surrogate_alert_id_and_title_are_repaired(bulk_log):
    alert = {**entry({}), "title": f"t{LONE}", "text": LONE, "alert_id": LONE}
    answer = bulk_log(alert, name="bulk_alert", key="alerts")
    assert answer == {"data": {"accepted": 1, "duplicates": 0}, "error": None}
    assert list(EntryReceipt.objects.values_list("key", flat=True)) == ["?"]


def test_a_lone_surrogate_in_a_table_prompt_is_a_trajectory_of_the_repaired_prompt(
    bulk_log,
):
    answer = bulk_log(entry({"completions": table(row(prompt=LONE))}))
    assert answer["error"] is None and answer["data"]["accepted"] == 1
    traj = Trajectory.objects.get()
    assert traj.task_id == task_id_for("?")
    assert traj.segments[0]["text"] == "?"


@pytest.mark.parametrize(
    "messages",
    [chat(content=LONE), chat(role=LONE), [{"role": "user", "content": [LONE]}]],
)
def test_a_lone_surrogate_in_a_trace_message_is_repaired(bulk_log, messages):
    answer = bulk_log(entry({"rollout": trace(messages, reward=1.0)}))
    assert answer["error"] is None and answer["data"]["accepted"] == 1
    assert "?" in Trajectory.objects.get().segments[0]["text"]


def test_task_ids_of_a_lone_surrogate_are_those_of_its_repair():
    # The pure converter hashes what it is given, repaired or not, the same way.
    assert task_id_for(f"a{LONE}b") == task_id_for("a?b")
    assert task_id_for("é") == "p-" + hashlib.sha1("é".encode()).hexdigest()[:12]


# --- values of a shape the client never sends: refused by their path ---------------------
@pytest.mark.parametrize(
    "step", [[1], {"a": 1}, "3", 1.5, True, -1, 2**31, 2**63, 2**70]
)
def test_a_table_rows_step_that_is_not_a_whole_number_is_refused_naming_it(
    bulk_log, step
):
    answer = bulk_log(entry({"completions": table(row(), row(step=step))}))
    assert_refused(
        answer,
        "logs[0].metrics.completions._value[1].step: must be a whole number from 0",
    )


def test_a_body_of_more_json_values_than_the_limit_is_refused_before_parsing(
    bulk_log, settings, monkeypatch
):
    # 10M "{}," in 30 MB once grew the server by ~800 MB while json.loads built them.
    from dashboard.api import trackio as api

    settings.EVENTS_MAX_VALUES = 1000  # 200 entries of ~10 values each
    parsed = []
    import json
    from types import SimpleNamespace

    spy = SimpleNamespace(dumps=json.dumps, loads=lambda raw: parsed.append(raw) or {})
    monkeypatch.setattr(api, "json", spy)
    answer = bulk_log(*[entry({"loss": 1.0}) for _ in range(200)])
    assert answer["data"] is None and "EVENTS_MAX_VALUES" in answer["error"]
    assert parsed == [] and not Run.objects.exists()


def test_commas_and_brackets_inside_strings_are_not_counted_as_values(
    bulk_log, settings
):
    # A completion of tool-call JSON or LaTeX: its text is one value.
    settings.EVENTS_MAX_VALUES = 1000
    text = '{"name": "calc", "args": [1, 2, 3]}, ' * 200  # 1,800 commas and brackets
    answer = bulk_log(entry({"completions": table(row(completion=text))}))
    assert answer["error"] is None and answer["data"]["accepted"] == 1


@pytest.mark.parametrize("step", [2**31, 2**63])
def test_a_trl_global_step_out_of_the_32_bit_range_is_refused_naming_it(bulk_log, step):
    metrics = {
        "train/loss": 1.0,
        "train/global_step": step,
        "completions": table(row()),
    }
    config = {"num_generations": 2, "report_to": ["trackio"]}
    answer = bulk_log(entry(metrics, config=config))
    assert answer["data"] is None
    assert (
        "train/global_step: must be a whole number from 0 to 2147483647"
        in (answer["error"])
    )


@pytest.mark.parametrize("messages", [7, True, 1.5, "hi", {"role": "user"}])
def test_trace_messages_that_are_not_a_list_are_refused_naming_them(bulk_log, messages):
    one = bulk_log(entry({"rollout": trace(messages)}))
    assert_refused(one, "logs[0].metrics.rollout.messages: must be a list of messages")
    several = bulk_log(
        entry({"x": 1.0}), entry({"rollout": [trace(chat()), trace(messages)]})
    )
    assert_refused(
        several, "logs[1].metrics.rollout[1].messages: must be a list of messages"
    )


def test_a_log_id_that_is_not_a_short_string_is_refused_naming_it(bulk_log):
    for bad in (7, ["a"], "x" * 65, ""):
        assert_refused(
            bulk_log(entry({"loss": 1.0}), entry({"loss": 1.0}, log_id=bad)),
            "logs[1].log_id: must be a string of 1 to 64 chars",
        )


def test_odd_but_harmless_values_are_taken(bulk_log):
    messages = [
        {"role": "user", "content": [{"text": 5}]},
        {"role": "assistant", "content": "", "tool_calls": 5},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"arguments": "[" * 10**4}],
        },
    ]
    logs = [
        entry({"huge": 10**400, "tiny": -(10**400)}, step=0),
        entry({"rollout": trace(messages, reward=1.0)}, step=2),
    ]
    answer = bulk_log(*logs)
    assert answer["error"] is None and answer["data"]["accepted"] == 2
    points = dict(MetricPoint.objects.values_list("key", "value"))
    assert points == {"huge": float("inf"), "tiny": float("-inf")}


# --- the last line of defence -------------------------------------------------------------
def test_an_entry_failing_in_a_way_no_check_foresaw_refuses_its_call(
    bulk_log, monkeypatch, caplog
):
    def broken(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(convert, "entry_events", broken)
    with caplog.at_level(logging.ERROR, logger="dashboard.runs.trackio"):
        answer = bulk_log(entry({"loss": 1.0}), entry({"loss": 2.0}))
    assert_refused(answer, "logs[0]: could not be imported (KeyError)")
    assert "/" not in answer["error"]  # no server paths
    assert any("KeyError" in r.getMessage() for r in caplog.records)
