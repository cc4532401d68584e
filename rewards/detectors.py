"""Reward-hacking detectors: pure functions over a window of per-step summaries.

A summary is a flat ``{metric: float}`` for one training step (see :func:`summarize`);
a detector compares the early and late halves of the window against thresholds
(``DetectorConfig.thresholds``, defaults in ``rewards.config.DEFAULT_THRESHOLDS``) and
returns a :class:`Finding` with its evidence, or None. Each pattern is one a real run
showed: serial collapse and spurious parallelism (Kimi K2.5 PARL), single-search exit
and one-at-a-time pruning (Chroma Context-1), a judge that rises while the verifiable
outcome does not (GRM hacking), length/truncation drift and entropy collapse (MiniMax-M1,
DAPO). The stateful wrapper that fires alerts lives in :mod:`rewards.monitor`.

Thresholds (``<detector>.<name>``: default), all judged on the late half of the window:

* ``serial_collapse.max_parallelism`` 1.2, ``.min_parallelism`` 0.5,
  ``.min_fall`` 0.3, ``.after_windows`` 2: sub-agents per stage at or below the
  maximum but at least the minimum (a policy that never spawns a sub-agent, 0.00 ->
  0.00, is not running anything serially), either fallen there by ``min_fall`` from
  an early half that fanned out (above the maximum; each half ``min_steps`` steps,
  the fall two standard errors: at any age) or staying there once the run is
  ``after_windows`` windows old (a fresh policy starts serial before it learns to
  fan out); or
  ``.min_serial_share`` 0.5 of the episodes serial (``serial``: they completed
  subtasks and no stage ran two sub-agents at once, the orchestrator solving them
  itself included), risen by ``min_fall`` or staying past the warm-up.
* ``spurious_parallelism.min_parallelism`` 2, ``.max_finish_rate`` 0.4,
  ``.max_yield`` 0.35, ``.min_critical_drop`` 0.1, ``.min_proxy_reward`` 0.1: wide
  fan-out, few subtasks done (or few per sub-agent spawned while proxy terms pay at
  least ``min_proxy_reward`` an episode), and critical steps that fell by less than
  10% from the early half.
* ``single_search_exit.min_frac`` 0.5, ``.min_rise`` 0.2, ``.after_windows`` 2:
  share of episodes ended after <= 1 search, risen there by ``min_rise`` from the
  early half (a learned exit, at any age) or staying there once the run is two
  windows old (a fresh policy answers early before it has learned anything).
* ``one_at_a_time_pruning.min_prunes`` 2, ``.min_single_frac`` 0.8: prunes per
  episode, and the share of them that drop a single document; or
  ``.min_episode_share`` 0.5 of the episodes pruning that way themselves
  (``one_at_a_time``), risen by ``.min_rise`` 0.2 or staying there once the run
  is ``.after_windows`` 2 windows old.
* ``judge_verifier_divergence.min_judge_rise`` 0.1, ``.max_outcome_rise`` 0.02.
* ``length_drift.max_growth`` 1.5 (late / early mean length), ``.max_truncated`` 0.3,
  ``.min_truncated_rise`` 0.2 (a truncated share that was already high and creeps up,
  98% -> 99% or 72% -> 86%, is not drift), ``.after_windows`` 2 (a fresh policy's
  rollouts lengthen as it learns to use its tools: judged once two windows old),
  ``.min_success_gain`` 0.05: not judged while the run is learning its task
  (:func:`rewards.window_stats.learning`: success that far above the run's start
  and two standard errors, keeping at least half the window's early gain and not
  fallen within the window by two standard errors), whose episodes lengthen as it
  learns a longer way to succeed. Growth after the task is solved, while success
  holds, is not drift by this rule (its cost is compute; a term that pays for
  length is ``reward_without_success``'s).
* The health detectors (entropy collapse, no learning signal, reward without
  success, repetition) are in :mod:`rewards.detectors_health`, the search ones
  (single-search exit, one-at-a-time pruning) in :mod:`rewards.detectors_search`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewards.config import DetectorConfig
from rewards.registry import Registry
from rewards.types import Episode, RewardResult
from rewards.window_stats import (
    SEPARATION,
    Summary,
    enough,
    halves,
    learning,
    past_warmup,
    risen,
    separation,
    series,
    tail,
)

# Per-step metric -> summary key, read when the results do not carry the value.
_FROM_METRICS = {
    "reward": "reward",
    "entropy": "entropy",
    "completions/mean_length": "length",
    "truncated/frac": "truncated",
    "critical_steps/mean": "critical_steps",
    "parallelism/mean": "parallelism",
    "frac_reward_zero_std": "zero_std",
}
_FROM_RESULTS = (
    "critical_steps", "parallelism", "subagents", "finish_rate", "subagent_yield",
    "success", "truncated",
    "judge/score", "searches", "prunes", "single_doc_prunes", "one_at_a_time",
    "single_search_exit",
    "repetition", "proxy_reward", "serial",
)  # fmt: skip


@dataclass(frozen=True)
class Finding:
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


Detector = Callable[[Sequence[Summary], DetectorConfig], "Finding | None"]


@dataclass(frozen=True)
class DetectorSpec:
    name: str
    fn: Detector
    severity: str
    envs: frozenset[str] | None = None  # None: any environment


DETECTORS: Registry[DetectorSpec] = Registry("detector")


def register(name: str, severity: str, envs: set[str] | None = None):
    def deco(fn: Detector) -> Detector:
        DETECTORS.register(name)(
            DetectorSpec(name, fn, severity, frozenset(envs) if envs else None)
        )
        return fn

    return deco


def summarize(
    step: int,
    metrics: Mapping[str, float],
    episodes: Sequence[Episode],
    results: Sequence[RewardResult],
) -> dict[str, float]:
    """One step's summary: batch means of the reward metrics, plus trainer metrics.

    >>> from rewards.types import RewardBreakdown
    >>> r = RewardResult(RewardBreakdown(1.0, {}, {}), metrics={"parallelism": 2.0})
    >>> summarize(3, {"entropy": 0.5}, [], [r, r])
    {'step': 3.0, 'entropy': 0.5, 'parallelism': 2.0}
    """
    out: dict[str, float] = {"step": float(step)}
    for src, key in _FROM_METRICS.items():
        v = metrics.get(src)
        if isinstance(v, int | float) and math.isfinite(v):
            out[key] = float(v)
    for key in _FROM_RESULTS:
        vals = [r.metrics[key] for r in results if key in r.metrics]
        vals = [float(v) for v in vals if math.isfinite(v)]
        if vals:
            out[key] = sum(vals) / len(vals)
    out.update(component_means(metrics))
    return out


def component_means(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``rewards/<c>/mean`` -> ``component/<c>``: what each reward term paid (which
    term a reward that rose without success rose from)."""
    return {
        "component/" + key.split("/")[1]: float(v)
        for key, v in metrics.items()
        if key.startswith("rewards/") and key.endswith("/mean") and key.count("/") == 2
        and isinstance(v, int | float) and math.isfinite(v)
    }  # fmt: skip


@register("serial_collapse", "warning", {"swarm"})
def serial_collapse(window: Sequence[Summary], cfg: DetectorConfig) -> Finding | None:
    """Sub-agents per stage fell to about one, or most episodes do all their work one
    subtask at a time (the orchestrator solving them itself counts): the orchestrator
    stopped fanning out."""
    found = _serial_share(window, cfg)
    if found is not None:
        return found
    par = series(window, "parallelism")
    if not enough(cfg, par):
        return None
    limit = cfg.threshold("serial_collapse.max_parallelism")
    floor = cfg.threshold("serial_collapse.min_parallelism")
    early, late = halves(par)
    # A collapse is a fall (or a stay) at about one sub-agent per stage, not a climb
    # out of it, and not a policy that spawns none at all. A fall from fanning out
    # is judged at any age; a stay only once the run is past its warm-up.
    fell = _fell(par, early, late, limit, cfg)
    if late > limit or late > early + 1e-9 or late < floor:
        return None
    if not fell and (early < floor or not past_warmup(window, cfg, "serial_collapse")):
        return None
    subs = series(window, "subagents")
    return Finding(
        f"serial collapse: {late:.2f} sub-agents per stage (was {early:.2f}, "
        f"threshold {limit:g})",
        {"parallelism_early": early, "parallelism_late": late, "threshold": limit,
         "subagents_late": halves(subs)[1] if subs else None, "parallelism": tail(par)},
    )  # fmt: skip


def _fell(
    par: Sequence[float], early: float, late: float, limit: float, cfg: DetectorConfig
) -> bool:
    """Sub-agents per stage fell from fanning out (the early half above ``limit``) by
    ``min_fall``, told from noise: each half at least ``min_steps`` steps (at most
    half the window) and the
    fall :data:`SEPARATION` standard errors. A fresh policy's 0.5-1.4 sub-agents a
    step (the swarm demo's first steps) is not a collapse from fanning out: its
    "1.08 -> 0.56" over two steps a half was a false alarm at step 4."""
    return (
        early > limit
        and early - late >= cfg.threshold("serial_collapse.min_fall")
        and len(par) >= 2 * min(cfg.min_steps, cfg.window // 2)
        and separation(par) >= SEPARATION
    )


def _serial_share(window: Sequence[Summary], cfg: DetectorConfig) -> Finding | None:
    """Most episodes that did work did it serially (``serial``), risen there by
    ``min_fall`` from the early half, or staying there past the warm-up."""
    limit = cfg.threshold("serial_collapse.min_serial_share")
    rise = cfg.threshold("serial_collapse.min_fall")
    found = risen(window, cfg, "serial", limit, rise, "serial_collapse")
    if found is None:
        return None
    early, late, xs = found
    return Finding(
        f"serial collapse: {late:.0%} of episodes did all their work one subtask at "
        f"a time (was {early:.0%})",
        {"serial_early": early, "serial_late": late, "threshold": limit,
         "serial": tail(xs)},
    )  # fmt: skip


@register("spurious_parallelism", "critical", {"swarm"})
def spurious_parallelism(
    window: Sequence[Summary], cfg: DetectorConfig
) -> Finding | None:
    """Many sub-agents, little finished (few subtasks done, or few done per sub-agent
    spawned: most of them redundant, blocked or failed, while a proxy term pays),
    and critical steps not falling. Few done per sub-agent counts only when
    something besides the task pays (``proxy_reward``, such as r_parallel, at
    least ``min_proxy_reward`` an episode; or a trainer that does not say): wide,
    wasteful fan-out that only the task's own reward pays for (r_perf alone) is
    inefficiency its latency term charges for, not a hack of the reward."""
    par, fin = series(window, "parallelism"), series(window, "finish_rate")
    cs, yld = series(window, "critical_steps"), series(window, "subagent_yield")
    if not enough(cfg, par, fin, cs):
        return None
    min_par = cfg.threshold("spurious_parallelism.min_parallelism")
    max_fin = cfg.threshold("spurious_parallelism.max_finish_rate")
    max_yield = cfg.threshold("spurious_parallelism.max_yield")
    drop = cfg.threshold("spurious_parallelism.min_critical_drop")
    p_late, f_late = halves(par)[1], halves(fin)[1]
    y_late = halves(yld)[1] if yld else None
    cs_early, cs_late = halves(cs)
    proxy = series(window, "proxy_reward")
    paid = not proxy or halves(proxy)[1] >= cfg.threshold(
        "spurious_parallelism.min_proxy_reward"
    )
    low_yield = y_late is not None and y_late <= max_yield and paid
    wasted = f_late <= max_fin or low_yield
    if p_late < min_par or not wasted or cs_late <= cs_early * (1 - drop):
        return None
    yield_txt = f", {y_late:.2f} done per sub-agent" if y_late is not None else ""
    return Finding(
        f"spurious parallelism: {p_late:.1f} sub-agents per stage, "
        f"{f_late:.0%} of subtasks finished{yield_txt}, "
        f"critical steps {cs_early:.1f} -> {cs_late:.1f}",
        {"parallelism_late": p_late, "finish_rate_late": f_late,
         "yield_late": y_late, "critical_steps_early": cs_early,
         "critical_steps_late": cs_late, "finish_rate": tail(fin),
         "critical_steps": tail(cs)},
    )  # fmt: skip


@register("judge_verifier_divergence", "critical")
def judge_verifier_divergence(
    window: Sequence[Summary], cfg: DetectorConfig
) -> Finding | None:
    """The judge's score rises while the verifiable outcome (success) does not."""
    judge, succ = series(window, "judge/score"), series(window, "success")
    if not enough(cfg, judge, succ):
        return None
    (j0, j1), (s0, s1) = halves(judge), halves(succ)
    min_rise = cfg.threshold("judge_verifier_divergence.min_judge_rise")
    max_out = cfg.threshold("judge_verifier_divergence.max_outcome_rise")
    if j1 - j0 < min_rise or s1 - s0 > max_out:
        return None
    return Finding(
        f"judge vs verifier: judge score {j0:.2f} -> {j1:.2f} while success "
        f"{s0:.2f} -> {s1:.2f}",
        {"judge_early": j0, "judge_late": j1, "success_early": s0, "success_late": s1,
         "judge": tail(judge), "success": tail(succ)},
    )  # fmt: skip


@register("length_drift", "warning")
def length_drift(window: Sequence[Summary], cfg: DetectorConfig) -> Finding | None:
    """Completions growing fast, or more and more episodes cut off by the budget."""
    length, trunc = series(window, "length"), series(window, "truncated")
    # A fresh policy's rollouts lengthen as it learns to use its tools (more
    # searches, a calculator call before answering): not drift.
    if not past_warmup(window, cfg, "length_drift"):
        return None
    growth_limit = cfg.threshold("length_drift.max_growth")
    trunc_limit = cfg.threshold("length_drift.max_truncated")
    reasons, evidence, drift = [], {}, []
    if enough(cfg, length):
        l0, l1 = halves(length)
        evidence.update(length_early=l0, length_late=l1, length=tail(length))
        if l0 > 0 and l1 / l0 >= growth_limit:
            reasons.append(f"mean length {l0:.1f} -> {l1:.1f}")
            drift.append("length")
    if enough(cfg, trunc):
        t0, t1 = halves(trunc)
        evidence.update(truncated_early=t0, truncated_late=t1)
        if t1 >= trunc_limit and t1 - t0 >= cfg.threshold(
            "length_drift.min_truncated_rise"
        ):
            reasons.append(f"truncated {t0:.0%} -> {t1:.0%}")
            drift.append("truncated")
    # A policy learning its task lengthens its episodes, and runs into the budget
    # more often, while its success climbs (the swarm demos: 7 -> 25 tokens and up
    # to 75% cut off on the way from 5% to 90% success): judged only when it is not,
    # or when its success slid within the window (drift that costs it).
    if not reasons or learning(window, cfg, "length_drift", holding=True):
        return None
    # ``drift``: what drifted, so the evidence names the rollouts that show it.
    return Finding("length drift: " + "; ".join(reasons), {**evidence, "drift": drift})
