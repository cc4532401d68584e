"""Per-step metrics, named like TRL and verl where a name exists.

``reward``, ``reward_std`` (the mean over groups of the within-group std, as TRL logs
it), ``frac_reward_zero_std``, ``rewards/<component>/mean``, ``completions/mean_length``
(action tokens per trajectory), ``num_turns``, ``tools/call_frequency`` (well-formed tool
calls per trajectory), ``timing_s/*``, ``perf/tokens_per_s``, plus ours:
``groups_dropped``, ``truncated/frac``, and ``<name>/mean`` for every extra scalar a
reward result reports (``critical_steps/mean``, ``parallelism/mean``...).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from trainer.config import TrainConfig

if TYPE_CHECKING:
    from trainer.sampled import Sampled


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else math.nan


def step_metrics(
    config: TrainConfig,
    sampled: Sampled,
    update: dict[str, float],
    timing: dict[str, float],
) -> dict[str, float]:
    G = config.rollout.group_size
    totals = [r.breakdown.total for r in sampled.results]
    groups = [totals[i : i + G] for i in range(0, len(totals), G)]
    stds = [statistics.stdev(g) if len(g) > 1 else 0.0 for g in groups]
    m: dict[str, float] = {
        "reward": _mean(totals),
        "reward_std": _mean(stds),
        "frac_reward_zero_std": _mean([1.0 if s <= 1e-6 else 0.0 for s in stds]),
        "groups_dropped": float(sampled.groups_dropped),
    }
    names = sorted({k for r in sampled.results for k in r.breakdown.components})
    for name in names:
        m[f"rewards/{name}/mean"] = _mean(
            [float(r.breakdown.components.get(name, 0.0)) for r in sampled.results]
        )
    extra = sorted({k for r in sampled.results for k in r.metrics})
    for name in extra:
        vals = [float(r.metrics[name]) for r in sampled.results if name in r.metrics]
        m[f"{name}/mean"] = _mean(vals)
    ros = sampled.rollouts
    m["completions/mean_length"] = _mean([float(r.action_tokens) for r in ros])
    m["num_turns"] = _mean([float(r.num_turns) for r in ros])
    m["tools/call_frequency"] = _mean(
        [float(sum(1 for s in r.episode.steps if s.ok and s.tool)) for r in ros]
    )
    m["tools/failure_frac"] = _mean(
        [
            float(sum(1 for s in r.episode.steps if not s.ok))
            / max(1, len(r.episode.steps))
            for r in ros
        ]
    )
    m["truncated/frac"] = _mean([1.0 if r.truncated else 0.0 for r in ros])
    m.update(update)
    for k, v in timing.items():
        m[f"timing_s/{k}"] = float(v)
    tokens = sum(len(r.token_ids) for r in ros)
    m["perf/tokens_per_s"] = tokens / timing["step"] if timing["step"] > 0 else math.nan
    m["lr"] = config.optim.lr
    return m
