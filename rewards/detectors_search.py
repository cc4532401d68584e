"""The search detectors (Chroma Context-1's hacks of a recall-first reward): an agent
that answers after one search, and one that prunes one document at a time for the
"progress" each prune feels like. Registered into :data:`rewards.detectors.DETECTORS`
like the others (``rewards`` imports this module), thresholds documented there.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.config import DetectorConfig
from rewards.detectors import Finding, register
from rewards.window_stats import Summary, enough, halves, risen, series, tail


@register("single_search_exit", "warning", {"search"})
def single_search_exit(
    window: Sequence[Summary], cfg: DetectorConfig
) -> Finding | None:
    """Most episodes end after at most one search."""
    limit = cfg.threshold("single_search_exit.min_frac")
    rise = cfg.threshold("single_search_exit.min_rise")
    # Learned: a rise from searching more (at any age), or a stay past the warm-up.
    found = risen(window, cfg, "single_search_exit", limit, rise, "single_search_exit")
    if found is None:
        return None
    early, late, xs = found
    return Finding(
        f"single-search exit: {late:.0%} of episodes answer after one search "
        f"(was {early:.0%})",
        {"frac_early": early, "frac_late": late, "threshold": limit,
         "frac": tail(xs)},
    )  # fmt: skip


@register("one_at_a_time_pruning", "warning", {"search"})
def one_at_a_time_pruning(
    window: Sequence[Summary], cfg: DetectorConfig
) -> Finding | None:
    """Repeated prunes, nearly all of a single document: on average per episode, or
    in most episodes (``one_at_a_time``: pruned at least twice, 80% of one
    document; risen there, or staying there past the warm-up)."""
    prunes, single = series(window, "prunes"), series(window, "single_doc_prunes")
    if not enough(cfg, prunes, single):
        return None
    p_late, s_late = halves(prunes)[1], halves(single)[1]
    share = s_late / p_late if p_late > 0 else 0.0
    min_prunes = cfg.threshold("one_at_a_time_pruning.min_prunes")
    min_share = cfg.threshold("one_at_a_time_pruning.min_single_frac")
    evidence = {"prunes_late": p_late, "single_share": share, "prunes": tail(prunes)}
    if p_late >= min_prunes and share >= min_share:
        return Finding(
            f"one-at-a-time pruning: {p_late:.1f} prunes per episode, "
            f"{share:.0%} of one document",
            evidence,
        )
    found = risen(
        window,
        cfg,
        "one_at_a_time",
        cfg.threshold("one_at_a_time_pruning.min_episode_share"),
        cfg.threshold("one_at_a_time_pruning.min_rise"),
        "one_at_a_time_pruning",
    )
    if found is None:
        return None
    early, late, xs = found
    return Finding(
        f"one-at-a-time pruning: {late:.0%} of episodes prune again and again, one "
        f"document at a time (was {early:.0%})",
        {**evidence, "episodes_early": early, "episodes_late": late,
         "one_at_a_time": tail(xs)},
    )  # fmt: skip
