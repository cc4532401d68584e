"""The typed event schema (``trainer.event_schema``) accepts every event the trainer
writes, and names the bad field of a bad one."""

from __future__ import annotations

import json

import pytest

from trainer import TrainConfig
from trainer.event_schema import EventError, check_event, events_json_schema
from trainer.events import JsonlSink
from trainer.runner import run_from_config


@pytest.mark.parametrize("env", ["calc", "search", "swarm"])
def test_every_event_of_a_real_run_passes_the_schema(env, tmp_path):
    cfg = TrainConfig.model_validate(
        {
            "env": {"name": env},
            "steps": 2,
            "seed": 1,
            "model": {"size": "tiny", "device": "cpu"},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 3},
            "checkpoint": {"every": 2},
        }
    )
    path = tmp_path / "events.jsonl"
    sink = JsonlSink(path)
    run_from_config(cfg, sink, checkpoint_dir=tmp_path / "ckpt")
    sink.close()
    lines = path.read_text().splitlines()
    kinds = set()
    for line in lines:  # as the HTTP ingest sees them: parsed back from JSON
        event = json.loads(line)
        check_event(event)
        kinds.add(event["type"])
    assert {"run_started", "step", "trajectory", "checkpoint", "run_finished"} <= kinds


@pytest.mark.parametrize(
    "event, field",
    [
        ({"type": "step", "step": "3", "metrics": {}}, "step"),
        ({"type": "step", "step": 3, "metrics": {"kl": "big"}}, "metrics.kl"),
        ({"type": "step", "step": 3, "metrics": {"": 1.0}}, 'metrics.""'),
        ({"type": "trajectory", "step": 1, "group": 0, "index": -1}, "index"),
        (
            {
                "type": "trajectory",
                "step": 1,
                "group": 0,
                "index": 0,
                "segments": [{"kind": "action", "token_ids": [1, 2.5]}],
            },
            "segments.0.token_ids.1",
        ),
        (
            {
                "type": "trajectory",
                "step": 1,
                "group": 0,
                "index": 0,
                "segments": [{"kind": "action", "series": {"kl": [0.5, True]}}],
            },
            "segments.0.series.kl.1",  # a flag is sent as 1 or 0
        ),
        (
            {
                "type": "trajectory",
                "step": 1,
                "group": 0,
                "index": 0,
                "segments": [{"kind": "action", "series": {"<b>": [0.5]}}],
            },
            "segments.0.series.<b>",
        ),
        ({"type": "judgement", "step": 1, "group": 0, "index": 0}, "judge"),
        ({"type": "run_finished", "status": "exploded"}, "status"),
        ({"type": "rollout"}, "type"),
        ({"step": 1}, "type"),
        ("step", "(line)"),
    ],
)
def test_a_bad_event_names_its_field(event, field):
    with pytest.raises(EventError) as info:
        check_event(event)
    assert info.value.field == field


def _cp(stages, path=()):
    return {"type": "critical_path", "step": 1, "group": 0, "index": 0,
            "stages": stages, "path": list(path)}  # fmt: skip


@pytest.mark.parametrize(
    "stages, path, field",
    [
        ([[1, "x"]], (), "stages.0"),  # a page read int("x"): a 500
        ([[1, [1, "2"]]], (), "stages.0"),
        ([{"orchestrator_steps": -1}], (), "stages.0"),
        ([{"subagents": [{"steps": "many"}]}], (), "stages.0"),
        ([[1, [1] * 1025]], (), "stages.0"),  # a page drew 900,000 bars from 2.8 KB
        ([[1, [1] * 1000]] * 5, (), "stages"),  # 5,000 sub-agents in all
        ([[1, [1]]] * 1025, (), "stages"),
        ([[1, [1]]], ("0",), "path.0"),
    ],
)
def test_a_critical_path_is_a_timeline_of_bounded_size(stages, path, field):
    with pytest.raises(EventError) as info:
        check_event(_cp(stages, path))
    assert info.value.field.startswith(field), info.value.field


def test_a_critical_path_in_either_spelling_passes():
    from rewards.parl import critical_path

    swarm = [{"orchestrator_steps": 1, "subagents": [
        {"subtask": "search", "steps": 3, "success": True}, {"steps": 2}, 4]}]  # fmt: skip
    for stages in ([(1, [5, 3, 4]), (2, [])], swarm, [[1, [1] * 1024]] * 4):
        cp = critical_path(stages)
        check_event(json.loads(json.dumps({**_cp([]), **cp})))


def test_non_finite_numbers_and_nulls_are_valid_where_the_trainer_writes_them():
    check_event(
        {
            "type": "step",
            "step": 0,
            "metrics": {"kl": "NaN", "a": "Infinity", "b": "-Infinity", "c": None},
        }
    )
    check_event(
        {
            "type": "trajectory",
            "step": 1,
            "group": 0,
            "index": 0,
            "future_field": [1, 2],  # unknown keys are ignored
            "segments": [
                {
                    "kind": "prompt",
                    "token_ids": [4, 5, 6],
                    "logprob": [None, -1.5, "NaN"],
                }
            ],
        }
    )


def _segment(**seg):
    return {
        "type": "trajectory",
        "step": 1,
        "group": 0,
        "index": 0,
        "segments": [{"kind": "completion", **seg}],
    }


@pytest.mark.parametrize(
    "seg,error",
    [
        # Values with no tokens to belong to were stored as empty arrays.
        (
            {"text": "hi", "logprob": [-1, -2], "advantage": [0.5, 0.5]},
            "segments.0: logprob: 2 values for 0 tokens",
        ),
        # More values than tokens were cut to the tokens' count.
        (
            {"tokens": ["a", "b"], "logprob": [-1] * 5},
            "segments.0: logprob: 5 values for 2 tokens",
        ),
        (
            {"token_ids": [1], "series": {"mismatch_kl": [0.1, 0.2]}},
            "segments.0: series.mismatch_kl: 2 values for 1 tokens",
        ),
        ({"token_ids": [1], "token_text": ["a", "b"]}, "segments.0: token_text: 2"),
        # Ids past 32 bits were stored as -1.
        ({"token_ids": [1, 2**63]}, "segments.0.token_ids.1:"),
        ({"token_ids": [-1]}, "segments.0.token_ids.0:"),
        # Positions past the segment were dropped.
        (
            {"token_ids": [1, 2], "special": [2]},
            "segments.0: special: position 2 is past",
        ),
        (
            {"token_ids": [1, 2], "turns": [[5, "user"]]},
            "segments.0: turns: position 5 is past",
        ),
        (
            {"token_ids": [1, 2], "masked": [[9, "is_ratio"]]},
            "segments.0: masked: position 9 is past",
        ),
    ],
)
def test_per_token_values_that_would_be_cut_or_dropped_are_refused_naming_them(
    seg, error
):
    with pytest.raises(EventError) as info:
        check_event(_segment(**seg))
    assert str(info.value).startswith(error), str(info.value)


def test_fewer_values_than_tokens_are_taken_the_rest_not_computed():
    check_event(_segment(token_ids=[1, 2, 3], tokens=["a"], logprob=[None, -1.0]))


def test_the_json_schema_lists_every_event_type():
    schema = events_json_schema()
    text = json.dumps(schema)
    for kind in ("run_started", "trajectory", "judgement", "critical_path", "alert"):
        assert f'"{kind}"' in text
