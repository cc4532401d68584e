"""TRL's completions table, whichever way it arrives: which of its columns are the
reward functions', and what a row's reward is. One rule for the three readers of it
(the ``log_completions`` parquet files, a W&B table, a trackio table).

TRL (``GRPOTrainer.log``, trl/trainer/grpo_trainer.py, 1.16) builds the table as
``{"step", "prompt", "completion", **rewards, **extra, "advantage"}`` (plus ``image``
for a vision run): a column per reward function, then the ``log_extra`` columns
reward functions logged (numbers too), then ``advantage``. Nothing in the table says
where the rewards end, so the reward functions are, in this order of trust:

1. the names the run logged as ``rewards/<name>/mean`` (TRL logs a step's metrics
   just before its table), when any number column has one of them;
2. else the first as many number columns as ``reward_weights`` has weights;
3. else every number column.

A row's reward is TRL's: the weighted sum over the reward functions that scored it
(NaN: one did not), NaN when none did (TRL marks such a completion unscorable,
``unscorable_mask`` in ``_generate_and_score_completions``). Its components stay the
reward functions' own scores; the weights go beside them (``rewards["weights"]``,
:func:`column_weights`), so score x weight over the components adds up to the total.

Pure data in, data out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

NOT_REWARDS = frozenset({"step", "prompt", "completion", "advantage", "image"})
Number = Callable[[Any], "float | None"]


def plain_number(value: Any) -> float | None:
    """A cell's number (NaN included), None for anything else (a bool is not one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def logged_rewards(metric_names: Iterable[str]) -> set[str]:
    """The reward functions' names in a run's metric names: ``rewards/<name>/mean``,
    with or without transformers' ``train/`` prefix (a name may hold ``/``)."""
    out = set()
    for key in metric_names:
        key = key.removeprefix("train/")
        if key.startswith("rewards/") and key.endswith("/mean"):
            name = key[len("rewards/") : -len("/mean")]
            if name:
                out.add(name)
    return out


def number_columns(
    columns: Sequence[str], rows: Sequence[Mapping[str, Any]], number: Number
) -> list[str]:
    """The columns, in order, that hold a number in some row and nothing but numbers
    or nulls in every other (``step``, ``advantage`` and the texts are never
    rewards)."""
    out = []
    for column in columns:
        if column in NOT_REWARDS:
            continue
        cells = [row.get(column) for row in rows]
        values = [number(c) for c in cells]
        if any(v is not None for v in values) and all(
            v is not None or c is None for c, v in zip(cells, values, strict=True)
        ):
            out.append(column)
    return out


def reward_columns(
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    *,
    weights: Any = None,
    logged: Iterable[str] = (),
    number: Number = plain_number,
) -> list[str]:
    """The reward functions' columns of a completions table (the module's rule);
    ``logged``: the reward names the run's metrics hold (:func:`logged_rewards`)."""
    numeric = number_columns(columns, rows, number)
    known = set(logged)
    if any(n in known for n in numeric):
        return [n for n in numeric if n in known]
    if isinstance(weights, (list, tuple)) and 0 < len(weights) <= len(numeric):
        return numeric[: len(weights)]
    return numeric


def _scale(names: Sequence[str], weights: Any, number: Number) -> list[float] | None:
    """The weight of each reward column: ``weights`` (the config's ``reward_weights``,
    by position) when there is one number per column; else None (each weighs 1)."""
    if not (isinstance(weights, (list, tuple)) and len(weights) == len(names)):
        return None
    scale = [number(w) for w in weights]
    return None if any(w is None for w in scale) else scale


def column_weights(
    names: Sequence[str], weights: Any = None, number: Number = plain_number
) -> dict[str, float]:
    """``{reward column: weight}`` as :func:`row_reward` weighs the columns; empty
    when no ``reward_weights`` apply (each weighs 1). The raw components and these
    weights are what a row's total is made of: a page shows each component's part of
    the total (score x weight) from them."""
    scale = _scale(names, weights, number)
    return dict(zip(names, scale, strict=True)) if scale is not None else {}


def row_reward(
    row: Mapping[str, Any],
    names: Sequence[str],
    weights: Any = None,
    number: Number = plain_number,
) -> tuple[dict[str, float], float]:
    """(components, total) of one row: each reward function's number (NaN kept, an
    empty cell left out) and their sum weighted by ``weights`` (the config's
    ``reward_weights``, by position, when there is one per reward column; else 1).
    The components stay the reward functions' own scores, as TRL logs them
    (``rewards/<name>/mean``); :func:`column_weights` says what each weighs."""
    scale = _scale(names, weights, number) or [1.0] * len(names)
    components: dict[str, float] = {}
    scored = []
    for name, w in zip(names, scale, strict=True):
        value = number(row.get(name))
        if value is None:
            continue
        components[name] = value
        if not math.isnan(value):
            scored.append(w * value)
    if not scored:
        return components, math.nan
    if not all(math.isfinite(v) for v in scored):
        return components, sum(scored)  # fsum raises on inf + -inf; this is NaN
    try:
        return components, math.fsum(scored)
    except OverflowError:  # finite terms past the float range together (1e308 * 2)
        return components, sum(scored)
