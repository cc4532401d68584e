"""Weight schedules: a component's weight as a function of the training step."""

from __future__ import annotations

from rewards.config import WeightSchedule


def weight_at(weight: float, schedule: WeightSchedule, step: int) -> float:
    """The scheduled weight at ``step`` (steps before 0 count as 0).

    PARL anneals lambda_parallel and lambda_finish linearly to 0 (Kimi K2.5): the
    auxiliary rewards bootstrap parallel behaviour, then r_perf takes over.

    >>> weight_at(0.5, WeightSchedule(kind="linear", end=0.0, steps=100), 25)
    0.375
    >>> weight_at(0.5, WeightSchedule(kind="linear", end=0.0, steps=100), 1000)
    0.0
    >>> weight_at(2.0, WeightSchedule(), 7)
    2.0
    """
    if schedule.kind == "constant":
        return weight
    frac = min(max(step, 0), schedule.steps) / schedule.steps
    return weight + (schedule.end - weight) * frac
