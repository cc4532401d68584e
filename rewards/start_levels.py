"""What a run looked like at its start, for detectors that compare with it rather
than with their window (an environment's own level: the swarm demo's spawns repeat 8%
of their word pairs at its start, the search demo's queries 14%; a shortcut learned
more slowly than the window): the mean of each of :data:`START_KEYS` over its first
:data:`START_STEPS` values in the run, and that mean's standard error, carried in
every later summary as ``start/<key>`` and ``start/<key>/se`` (:func:`with_start`;
the monitor and the server's detection both add them, each from the values it has
seen up to that step)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Summary = Mapping[str, float]

START_KEYS = ("repetition", "proxy_reward", "length", "success")
START_STEPS = 5


def note_start(first: dict[str, list[float]], summary: Summary) -> None:
    """Keep ``summary``'s values of :data:`START_KEYS` in ``first`` while a key has
    fewer than :data:`START_STEPS` of them (the monitor, one summary a step)."""
    for key in START_KEYS:
        xs = first.setdefault(key, [])
        if key in summary and len(xs) < START_STEPS:
            xs.append(float(summary[key]))


def with_start(
    summary: Summary, first: Mapping[str, Sequence[float]]
) -> dict[str, float]:
    """``summary`` plus ``start/<key>``: the mean of ``first[key]`` (the key's first
    :data:`START_STEPS` values in the run, as many as there are yet) for each of
    :data:`START_KEYS` that has any, and ``start/<key>/se``, that mean's standard
    error, where it has two or more (how sure the start level is: one long first
    step is not the run's start).

    >>> with_start({"step": 3.0}, {"repetition": [0.1, 0.3], "proxy_reward": []})
    {'step': 3.0, 'start/repetition': 0.2, 'start/repetition/se': 0.1}
    """
    out = dict(summary)
    for key in START_KEYS:
        xs = list(first.get(key, ()))[:START_STEPS]
        if xs:
            m, se = mean_se(xs)
            out[f"start/{key}"] = m
            if se is not None:
                out[f"start/{key}/se"] = round(se, 12)
    return out


def mean_se(xs: Sequence[float]) -> tuple[float, float | None]:
    """``xs``'s mean and that mean's standard error (None for fewer than 2 values).

    >>> mean_se([1.0, 3.0])
    (2.0, 1.0)
    """
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, (var / len(xs)) ** 0.5


def start_level(window: Sequence[Summary], key: str, what: str = "") -> float | None:
    """The run's start level of ``key`` carried by the window's newest summary
    (``what="/se"``: its standard error)."""
    v = window[-1].get(f"start/{key}{what}") if window else None
    return float(v) if isinstance(v, int | float) else None
