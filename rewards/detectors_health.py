"""Detectors of a run that stopped doing its task, whatever the task: the reward paid
for something else, a shortcut, degenerate output, no signal left to learn from,
entropy gone.

Registered into :data:`rewards.detectors.DETECTORS` like the others (``rewards``
imports this module), judged over the same window of step summaries. Thresholds
(``<detector>.<name>``: default):

* ``entropy_collapse.min_entropy`` 0.1 nats/token, ``.max_ratio`` 0.25 (late / early),
  ``.min_success_gain`` 0.05: a fall to ``max_ratio`` within the window at any
  time; under the floor only while the run is not learning its task
  (:func:`rewards.window_stats.learning`, as ``length_drift``): a policy that is
  solving its task sharpens (the live swarm demo: 0.79 -> 0.097 nats/token while its
  success climbed 0.06 -> 0.9), and its entropy under a floor is not a warning.
* ``no_learning_signal.min_frac`` 0.95, ``.min_steps`` 8: the share of groups whose
  rewards were all equal (``frac_reward_zero_std``) at or above it, on average and in
  the late half, over the last that many steps. Not a hack but its cousin: every
  advantage is zero, so nothing is learned while the run looks healthy.
* ``reward_without_success.min_reward_rise`` 0.1, ``.max_outcome_rise`` 0.02,
  ``.max_outcome_share`` 0.25: what the proxy terms pay (``proxy_reward``: the
  components registered as ``proxy``, such as ``format``, ``judge``, ``r_parallel``)
  rose by at least ``min_reward_rise`` across the window (its trend:
  :func:`rewards.window_stats.trend`) while success rose by no more than the larger of
  ``max_outcome_rise`` and ``max_outcome_share`` of it (format-only rewards, a gamed
  judge, a bonus the task does not need); names the term that rose most.
* ``shortcut.max_ratio`` 0.67, ``.max_outcome_rise`` 0.02, ``.min_separation`` 2:
  the late half's mean length at most that share of the early half's while success
  rose no more than that (a policy that stopped working the task: answering at once,
  exiting early), and the fall at least ``min_separation`` standard errors of the
  halves' difference (Welch's: step-to-step noise, which on a small run can make one
  long first step halve the "early" mean, is not a shortcut). Also judged against the
  run's start (``start/length``, ``start/success``, the means of its first 5 values,
  the start's standard error counted in the separation): a shortcut learned more
  slowly than the window falls less than ``max_ratio`` in every window. From the
  start only while the proxy terms pay at least ``.min_proxy_share`` (0.9) of the
  reward (``proxy_reward`` / ``reward``, late half): a weak policy drifting shorter
  under a task reward looks the same by length and success alone.
* ``repetition.max_repetition`` 0.25, ``.min_rise`` 0.2, ``.min_proxy_rise`` 0.1:
  the mean share of an episode's word bigrams that repeat an earlier one, at or
  above it in the late half and risen by ``min_rise`` above the run's start
  (``start/repetition``, the mean of its first 5 values), while the proxy terms pay
  ``min_proxy_rise`` more than at the start (degenerate output that pays: one call
  or one word over and over for a bonus).
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.config import DetectorConfig
from rewards.detectors import Finding, register
from rewards.start_levels import start_level
from rewards.window_stats import (
    Summary,
    below,
    enough,
    halves,
    learning,
    risen,
    separation,
    series,
    tail,
    trend,
)


@register("entropy_collapse", "warning")
def entropy_collapse(window: Sequence[Summary], cfg: DetectorConfig) -> Finding | None:
    """Policy entropy below a floor, or a small fraction of where the window began."""
    ent = series(window, "entropy")
    if not enough(cfg, ent):
        return None
    e0, e1 = halves(ent)
    floor = cfg.threshold("entropy_collapse.min_entropy")
    ratio = cfg.threshold("entropy_collapse.max_ratio")
    # A fall to ``ratio`` within the window is a collapse; under the floor only while
    # the run is not learning its task (a policy that solves it sharpens: the swarm
    # demo's 0.79 -> 0.097 nats/token as its success climbed 0.06 -> 0.9).
    fast = e0 > 0 and e1 / e0 <= ratio
    if not fast and (e1 > floor or learning(window, cfg, "entropy_collapse")):
        return None
    # Under the floor, say why now: what success did meanwhile (a run that never
    # learned, or one unlearning; entropy itself may have sat there for a while).
    # "0.024 -> 0.024 (under 0.1)" read as no change: a level under the floor is
    # said as one, the early half's beside it.
    succ = series(window, "success")
    said = f"{e0:.3f} -> {e1:.3f} nats/token"
    if not fast:
        said = f"{e1:.3f} nats/token, under the floor {floor:g} (early half {e0:.3f})"
        if enough(cfg, succ):
            s0, s1 = halves(succ)
            said += f" while success {s0:.2f} -> {s1:.2f}"
    return Finding(
        f"entropy collapse: {said}",
        {
            "entropy_early": e0,
            "entropy_late": e1,
            "floor": floor,
            "entropy": tail(ent),
        },
    )


@register("no_learning_signal", "warning")
def no_learning_signal(
    window: Sequence[Summary], cfg: DetectorConfig
) -> Finding | None:
    """Nearly every group's rewards were identical for many steps: group-relative
    advantages are all zero, so the policy gets no gradient from the reward."""
    need = max(int(cfg.threshold("no_learning_signal.min_steps")), cfg.min_steps)
    # The last ``min_steps`` steps, not the whole window: a run that stops learning
    # is told so that many steps later, not a window later.
    zero = series(window, "zero_std")[-need:]
    if len(zero) < need:
        return None
    limit = cfg.threshold("no_learning_signal.min_frac")
    mean, late = sum(zero) / len(zero), halves(zero)[1]
    if mean < limit or late < limit:
        return None
    return Finding(
        f"no learning signal: {mean:.0%} of groups had identical rewards over the "
        f"last {len(zero)} steps (threshold {limit:.0%}); their advantages are zero, "
        "so nothing is learned from them",
        {"zero_std_mean": mean, "zero_std_late": late, "threshold": limit,
         "frac_reward_zero_std": tail(zero)},
    )  # fmt: skip


@register("reward_without_success", "critical")
def reward_without_success(
    window: Sequence[Summary], cfg: DetectorConfig
) -> Finding | None:
    """What the proxy terms pay (those that do not verify the task: a format, a
    judge, a behaviour bonus; ``proxy_reward``) climbs while the verifiable outcome
    (success) does not climb with it. Names the term that rose most."""
    proxy, succ = series(window, "proxy_reward"), series(window, "success")
    if not enough(cfg, proxy, succ):
        return None
    up, won = trend(proxy), trend(succ)
    min_rise = cfg.threshold("reward_without_success.min_reward_rise")
    # Success may rise by noise, or by a fraction of what the proxy rose: a proxy
    # that shapes learning (a format reward early on) brings success along.
    allowed = max(
        cfg.threshold("reward_without_success.max_outcome_rise"),
        cfg.threshold("reward_without_success.max_outcome_share") * up,
    )
    if up < min_rise or won > allowed:
        return None
    rises = {
        key.split("/", 1)[1]: trend(xs)
        for key in sorted({k for s in window for k in s if k.startswith("component/")})
        if enough(cfg, xs := series(window, key))
    }
    term = max(rises, key=rises.__getitem__) if rises else None
    from_term = f" (most from {term}: {rises[term]:+.2f})" if term else ""
    late = halves(proxy)[1]
    return Finding(
        f"reward without success: proxy terms pay {up:+.2f}{from_term} across the "
        f"last {len(proxy)} steps while success moved {won:+.2f}",
        {"proxy_rise": up, "success_rise": won, "proxy_late": late,
         "component": term, "proxy_reward": tail(proxy), "success": tail(succ)},
    )  # fmt: skip


@register("repetition", "warning")
def repetition(window: Sequence[Summary], cfg: DetectorConfig) -> Finding | None:
    """Degenerate output that pays: the policy's actions repeat themselves (the
    share of an episode's word bigrams seen before in it) more and more, at or
    above ``max_repetition`` in the late half and risen ``min_rise`` above the
    run's own start (``start/repetition``; within the window when the start is not
    known), while what the proxy terms pay rose ``min_proxy_rise`` since the start
    (a per-call bonus earned again and again). A policy that learns to call its
    tools more (the search demo's queries, the swarm demo's spawns) repeats more
    too, but nothing besides the task pays it for that: not a hack. A trainer that
    does not report ``proxy_reward`` is judged on repetition alone."""
    limit = cfg.threshold("repetition.max_repetition")
    rise = cfg.threshold("repetition.min_rise")
    rep = series(window, "repetition")
    if not enough(cfg, rep):
        return None
    r0, r1 = halves(rep)
    start = start_level(window, "repetition")
    proxy, proxy_start = (
        series(window, "proxy_reward"),
        start_level(window, "proxy_reward"),
    )
    if proxy and proxy_start is not None:
        paid = halves(proxy)[1] - proxy_start
        if paid < cfg.threshold("repetition.min_proxy_rise"):
            return None
    if start is not None:
        if r1 < limit or r1 - start < rise:
            return None
        since = f"{start:.0%} at the run's start"
    else:
        found = risen(window, cfg, "repetition", limit, rise)
        if found is None:
            return None
        since = f"{r0:.0%} earlier"
    return Finding(
        f"repetition: {r1:.0%} of the policy's word pairs repeat within an episode "
        f"(was {since})",
        {"repetition_early": r0, "repetition_late": r1, "repetition_start": start,
         "threshold": limit, "min_rise": rise, "repetition": tail(rep)},
    )  # fmt: skip


@register("shortcut", "warning")
def shortcut(window: Sequence[Summary], cfg: DetectorConfig) -> Finding | None:
    """Episodes got much shorter while success did not rise: the policy stopped
    working the task (answering at once, exiting early) for a reward that does not
    need the work. Judged across the window (its late half against its early half)
    and against the run's start (``start/length``, ``start/success``): a shortcut
    learned more slowly than the window, whose every window falls by less than
    ``max_ratio``, is still a fall to that share of where the run began."""
    length, succ = series(window, "length"), series(window, "success")
    if not enough(cfg, length, succ):
        return None
    (l0, l1), (s0, s1) = halves(length), halves(succ)
    at = ""
    if not _shrunk(l1, l0, s1 - s0, separation(length), cfg):
        start = _start_fall(window, length, l1, s1, cfg)
        if start is None:
            return None
        (l0, s0), at = start, " (from the run's start)"
    return Finding(
        f"shortcut: episodes {l0:.1f} -> {l1:.1f} tokens while success "
        f"{s0:.2f} -> {s1:.2f}{at}",
        {"length_early": l0, "length_late": l1, "success_early": s0,
         "success_late": s1, "since": "at the run's start" if at else "earlier",
         "length": tail(length), "success": tail(succ)},
    )  # fmt: skip


def _start_fall(
    window: Sequence[Summary],
    length: Sequence[float],
    late: float,
    late_succ: float,
    cfg: DetectorConfig,
) -> tuple[float, float] | None:
    """The run's start (length, success) when the window's late half fell from it
    as :func:`_shrunk` asks (the start's standard error counted in the fall)."""
    start, succ = start_level(window, "length"), start_level(window, "success")
    if start is None or succ is None:
        return None
    # What the run is paid comes from the proxy terms: a weak policy drifting
    # shorter under a task reward (the format-only hack's healthy twin: episodes
    # 7.1 -> 3.5 tokens over 30 steps, success flat at 0.05, the proxy paying 60%
    # of the reward) is not paid for the fall; the hack (99%) is. Read from the
    # late half's steps that report both (never one's steps against the other's).
    paid = [
        (s["proxy_reward"], s["reward"])
        for s in window[len(window) // 2 :]
        if "proxy_reward" in s and "reward" in s
    ]
    late_reward = sum(r for _, r in paid)
    share = cfg.threshold("shortcut.min_proxy_share")
    if (
        len(paid) < max(2, cfg.min_steps // 2)
        or late_reward <= 0
        or sum(p for p, _ in paid) < share * late_reward
    ):
        return None
    start_se = start_level(window, "length", "/se") or 0.0
    t = below(length[len(length) // 2 :], start, start_se)
    return (start, succ) if _shrunk(late, start, late_succ - succ, t, cfg) else None


def _shrunk(
    late: float, before: float, succ_rise: float, t: float, cfg: DetectorConfig
) -> bool:
    """Episodes of mean length ``late`` are at most ``max_ratio`` of ``before``,
    success rose no more than ``max_outcome_rise``, and the fall is ``t`` >=
    ``min_separation`` standard errors."""
    return (
        before > 0
        and late / before <= cfg.threshold("shortcut.max_ratio")
        and succ_rise <= cfg.threshold("shortcut.max_outcome_rise")
        and t >= cfg.threshold("shortcut.min_separation")
    )
