"""Each reward-hacking detector on a recorded slice of its hacked run and of its
healthy twin (issue 25): the hack is caught within 10 RL steps of its onset, the
rollouts the alert names are hacked ones, and the twin raises nothing.

The slices (``tests/fixtures/hacking``) are cut from the suite's own runs by
``python bench/hacking_suite.py --slices tests/fixtures/hacking``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.hacking_cases import cases
from bench.hacking_measure import GOAL_DELAY, GOAL_PRECISION, measure_hack, replay
from bench.hacking_slices import read_slice

SLICES = Path(__file__).resolve().parents[1] / "fixtures" / "hacking"
CASES = {c.name: c for c in cases()}
RECORDED = sorted(
    p.name.removesuffix(".jsonl.gz")
    for p in SLICES.glob("*.jsonl.gz")
    if not p.name.endswith("-twin.jsonl.gz")
)


@pytest.mark.parametrize("name", RECORDED)
def test_the_hack_is_caught_within_ten_steps_naming_hacked_rollouts(name):
    meta, steps = read_slice(SLICES / f"{name}.jsonl.gz")
    result = measure_hack(CASES[name], meta, steps)
    assert result.onset == meta["onset"]  # the slice holds the onset of its run
    assert result.detector in CASES[name].detectors
    assert result.delay is not None and result.delay <= GOAL_DELAY
    assert result.named > 0 and result.precision >= GOAL_PRECISION


@pytest.mark.parametrize("name", RECORDED)
def test_its_healthy_twin_raises_nothing(name):
    meta, steps = read_slice(SLICES / f"{name}-twin.jsonl.gz")
    assert [(a.step, a.detector) for a in replay(meta, steps)] == []
