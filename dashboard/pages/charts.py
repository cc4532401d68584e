"""Which charts a run page shows, and which metric keys each one plots.

Metric names follow TRL/verl (``trainer.events``). Reward components are read from the
run's config, so a chart exists for each before its first step lands.
"""

from __future__ import annotations

from typing import Any

STANDARD: list[tuple[str, str, list[str]]] = [
    # (id, title, keys)
    ("reward", "Reward", ["reward", "reward_std"]),
    (
        "advantages",
        "Advantage mean / min / max",
        ["advantages/mean", "advantages/min", "advantages/max"],
    ),
    ("kl", "KL to reference", ["kl"]),
    ("entropy", "Entropy", ["entropy"]),
    (
        "clip",
        "Clip ratios",
        ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"],
    ),
    ("lengths", "Lengths", ["completions/mean_length", "num_turns"]),
    (
        "critical",
        "Critical steps and parallelism",
        ["critical_steps/mean", "total_steps/mean", "parallelism/mean"],
    ),
    ("dropped", "Groups dropped", ["groups_dropped", "frac_reward_zero_std"]),
    ("throughput", "Throughput (tokens/s)", ["perf/tokens_per_s"]),
    ("loss", "Policy loss and grad norm", ["policy_loss", "grad_norm"]),
]


def component_names(config: dict[str, Any]) -> list[str]:
    """The run's reward components in config order (their labels, else names).

    Stored dicts of per-component values do not keep this order (PostgreSQL's jsonb
    sorts keys), so pages order them by this list."""
    reward = config.get("reward") if isinstance(config, dict) else None
    if not isinstance(reward, dict):
        from dashboard.pages.catalog import default_reward

        env = ((config or {}).get("env") or {}).get("name", "calc")
        try:
            reward = default_reward(env)
        except KeyError:
            return []
    return [
        str(c.get("label") or c.get("name"))
        for c in reward.get("components") or []
        if isinstance(c, dict)
    ]


def component_keys(config: dict[str, Any]) -> list[str]:
    """``rewards/<key>/mean`` for each reward component of the run's config."""
    return [f"rewards/{name}/mean" for name in component_names(config)]


def in_order(values: dict[str, Any], order: list[str]) -> list[tuple[str, Any]]:
    """``values.items()`` in ``order``, unknown keys last (alphabetically)."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted(values.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


def _kl_beta(config: dict[str, Any]) -> float | None:
    algorithm = config.get("algorithm") if isinstance(config, dict) else None
    beta = (algorithm or {}).get("kl_beta", 0.0) if isinstance(algorithm, dict) else 0.0
    try:
        return float(beta)
    except (TypeError, ValueError):
        return None


def empty_text(chart_id: str, config: dict[str, Any]) -> str:
    """What a chart with no points says: why none will come, when that is known."""
    if chart_id == "kl" and _kl_beta(config) == 0.0:
        return "No KL penalty in this run (kl_beta = 0): KL is not computed."
    return "No data yet."


def run_charts(config: dict[str, Any]) -> list[dict[str, Any]]:
    charts = [
        {"id": cid, "title": title, "keys": keys, "empty": empty_text(cid, config)}
        for cid, title, keys in STANDARD
    ]
    components = component_keys(config)
    if components:
        charts.insert(
            1,
            {
                "id": "components",
                "title": "Reward components (weighted)",
                "keys": components,
                "empty": "No data yet.",
            },
        )
    return charts
