"""Event payloads: per-token arrays line up with the tokens they describe."""

from __future__ import annotations

from rewards.types import RewardBreakdown, RewardResult
from trainer.envs.base import Task
from trainer.rollout import Rollout, Segment
from trainer.trajectory_events import FLOAT_ARRAYS, trajectory_event


def _rollout() -> Rollout:
    return Rollout(
        task=Task(id="t1", prompt="p"),
        group=0,
        index=1,
        segments=[
            Segment(0, "prompt", [10, 11, 12], "prompt"),
            Segment(0, "action", [20, 21], None),
            Segment(0, "tool", [30], "tool"),
            Segment(1, "action", [40, 41, 42], None),
        ],
    )


def _event(arrays):
    ro = _rollout()
    return trajectory_event(
        3,
        ro,
        RewardResult(RewardBreakdown(1.0, {"outcome": 1.0}, {"outcome": (0.0, 1.0)})),
        dropped=arrays is None,
        advantage=0.5,
        tokens=[str(t) for t in ro.token_ids],
        texts=["a", "b", "c", "d"],
        arrays=arrays,
    )


def test_value_p_minus_1_describes_token_p_and_the_first_token_has_none():
    # 9 tokens -> 8 targets; target j scores token j + 1. Give target j the value j.
    arrays = {
        name: [float(j) + k / 10 for j in range(8)]
        for k, name in enumerate(FLOAT_ARRAYS)
    }
    ev = _event(arrays)
    lp = [seg["logprob"] for seg in ev["segments"]]
    assert lp == [[None, 0.0, 1.0], [2.0, 3.0], [4.0], [5.0, 6.0, 7.0]]
    adv = [seg["advantage"] for seg in ev["segments"]]
    assert adv[3] == [5.4, 6.4, 7.4]
    for seg in ev["segments"]:
        assert all(
            len(seg[n]) == len(seg["token_ids"]) == len(seg["tokens"])
            for n in FLOAT_ARRAYS
        )


def test_a_dropped_trajectory_has_no_values():
    ev = _event(None)
    assert ev["dropped"] is True
    for seg in ev["segments"]:
        for name in FLOAT_ARRAYS:
            assert seg[name] == [None] * len(seg["token_ids"])
