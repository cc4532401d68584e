"""Reward components that are another trainer's raw scores, and what each weighs.

Our trainer stores each component already weighted: the components of a rollout add
up to its reward, and ``rewards/<name>/mean`` is a weighted mean. TRL does not: its
reward functions' scores are logged as they are (``rewards/<name>/mean``, the
completions table's columns) and the reward is their sum weighted by
``reward_weights``. The readers of TRL's table keep the scores and store the weights
beside them (``rewards["weights"]``, :func:`trainer.importers.completions.
column_weights`); the trajectory page shows each component's part of the reward as
score x weight from them, and the run page's components chart says what it plots.

Everything read here is client-supplied: only finite numbers count as weights, and
names are escaped by the templates like any other text.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from django.db.models import Q

from dashboard.models import Run, Trajectory
from dashboard.pages import charts
from trainer.httpsink import FRAMEWORK as OUR_FRAMEWORK

MAX_ORDERS = 6  # components whose weights are tried in every order (6! = 720)
TOLERANCE = 1e-6


def _weight(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def stored(rewards: Any) -> dict[str, float]:
    """``{component: weight}`` a rollout was stored with (its finite numbers)."""
    told = rewards.get("weights") if isinstance(rewards, dict) else None
    if not isinstance(told, dict):
        return {}
    out = {}
    for name, value in told.items():
        w = _weight(value)
        if w is not None:
            out[str(name)] = w
    return out


def config_weights(config: Any) -> list[float] | None:
    """The run's ``reward_weights`` (TRL's config), when a list of finite numbers."""
    told = config.get("reward_weights") if isinstance(config, dict) else None
    if not isinstance(told, list) or not told:
        return None
    weights = [_weight(w) for w in told]
    return None if any(w is None for w in weights) else weights  # type: ignore[return-value]


def close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= TOLERANCE * max(1.0, abs(a), abs(b))


def fits_some_order(scores: list[float], weights: list[float], total: float) -> bool:
    """Whether the scores weighted by ``weights`` in some order add up to ``total``:
    a rollout stored without which weight is whose (before weights were kept), whose
    numbers do add up under the run's ``reward_weights``."""
    if len(scores) != len(weights) or not 0 < len(scores) <= MAX_ORDERS:
        return False
    finite = [s for s in scores if not math.isnan(s)]
    if len(finite) != len(scores) or not math.isfinite(total):
        return False
    for order in set(itertools.permutations(weights)):
        if close(math.fsum(s * w for s, w in zip(scores, order, strict=True)), total):
            return True
    return False


def weights_text(weights: dict[str, float] | list[float]) -> str:
    """``format_reward × 0.2, accuracy_reward × 1`` (or ``1, 0.2`` by position)."""
    if isinstance(weights, dict):
        return ", ".join(f"{name} × {w:g}" for name, w in weights.items())
    return ", ".join(f"{w:g}" for w in weights)


# --- the run page's components chart --------------------------------------------------
def scores_unweighted(run: Run) -> bool:
    """Whether the run's ``rewards/<name>/mean`` are raw scores, not weighted parts
    of the reward: a TRL run (its framework, or ``reward_weights`` in its config, as
    a W&B import of one has)."""
    if not run.external or run.framework == OUR_FRAMEWORK:
        return False
    config = run.config if isinstance(run.config, dict) else {}
    return run.framework == "trl" or "reward_weights" in config


def _named_weights(run: Run) -> dict[str, float]:
    """The weights the run's newest rollouts were stored with: its last step's (a
    bounded read: a run stored before weights were kept has none there, and its
    100k rollouts are not searched for one)."""
    rows = Trajectory.objects.filter(run=run)
    last = rows.order_by("-step").values_list("step", flat=True).first()
    if last is None:
        return {}
    told = (
        rows.filter(step=last)
        .filter(Q(rewards__has_key="weights"))
        .values_list("rewards", flat=True)
        .first()
    )
    return stored(told)


def run_charts(run: Run, keys: list[str], reward_key: str) -> list[dict[str, Any]]:
    """:func:`dashboard.pages.charts.run_charts` of the run page, the components
    chart titled for what it plots: a TRL run's components are its reward functions'
    raw mean scores, weighted into the reward by ``reward_weights`` (named in the
    chart's line), not the weighted parts our runs plot there."""
    out = charts.run_charts(
        run.config, keys if run.external else None, logged=keys, reward=reward_key
    )
    chart = next((c for c in out if c["id"] == "components"), None)
    if chart is None or not scores_unweighted(run):
        return out
    weights: dict[str, float] | list[float] | None = config_weights(run.config)
    if weights and any(w != 1.0 for w in weights):
        weights = _named_weights(run) or weights
        chart["title"] = "Reward components (unweighted scores)"
        chart["help"] = (
            "Each reward function's mean score per step, before weighting: the "
            "reward is their sum weighted by reward_weights "
            f"({weights_text(weights)}), so these lines do not add up to it."
        )
    else:
        chart["title"] = "Reward components"
        chart["help"] = (
            "Each reward function's mean score per step; with every weight 1 "
            "(no reward_weights), they add up to the reward."
        )
    chart["y_title"] = "score"
    return out
