"""Which charts a run page shows, and which metric keys each one plots.

Metric names follow TRL/verl (``trainer.events``). Reward components are read from the
run's config, so a chart exists for each before its first step lands. The families of
``trainer.metric_names.FAMILIES`` (staleness, train/inference mismatch) get a chart of
their own on any run that logged one of their names, with every such name it logged.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import trainer.envs  # noqa: F401  (registers the built-in environments)
from trainer.envs.base import ENVIRONMENTS
from trainer.metric_help import (
    CHART_HELP,
    SUMMARY_LABELS,
    is_summary,
    key_help,
)
from trainer.metric_names import FAMILIES

X_TITLE = "training step"

STANDARD: list[tuple[str, str, list[str]]] = [
    # (id, title, keys)
    ("reward", "Reward", ["reward", "reward_std"]),
    (
        "advantages",
        "Advantage mean / min / max",
        ["advantages/mean", "advantages/min", "advantages/max"],
    ),
    ("kl", "KL to reference", ["kl", "kl/coef"]),
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
    (
        "sampler",
        "Sampler vs learner log-probs",
        [
            "rollout/logprob_diff",
            "rollout/ratio_mean",
            "rollout/ratio_min",
            "rollout/ratio_max",
        ],
    ),
    ("throughput", "Throughput (tokens/s)", ["perf/tokens_per_s"]),
    # TRL's ``loss`` is the total loss (KL term included), not the policy loss.
    ("loss", "Loss and grad norm", ["loss", "policy_loss", "grad_norm"]),
]


def _components(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's reward components as its trainer pays them: a config of ours as
    :func:`trainer.runner.reward_config_for` resolves it (DAPO's ``overlong_penalty``
    added: the Reward components chart once left it out while trajectories and the
    what-if listed it), else as the config (or its environment's default reward)
    lists them."""
    resolved = _resolved_components(config)
    if resolved is not None:
        return resolved
    reward = config.get("reward") if isinstance(config, dict) else None
    if not isinstance(reward, dict):
        from dashboard.pages.catalog import default_reward

        try:
            reward = default_reward(env_name(config) or "calc")
        except KeyError:  # an environment this server does not have
            return []
    components = reward.get("components")
    if not isinstance(components, list):
        return []
    return [c for c in components if isinstance(c, dict)]


def _resolved_components(config: Any) -> list[dict[str, Any]] | None:
    """A config of our trainer's reward components as it runs them; None for
    anything that is not one."""
    if not isinstance(config, dict) or not config:
        return None
    from pydantic import ValidationError

    from trainer.config import TrainConfig
    from trainer.runner import reward_config_for

    try:
        rcfg = reward_config_for(TrainConfig.model_validate(config))
    except (ValidationError, ValueError, TypeError, KeyError):
        return None
    return [c.model_dump(mode="json") for c in rcfg.components]


def component_names(config: dict[str, Any]) -> list[str]:
    """The run's reward components in config order (their labels, else names).

    Stored dicts of per-component values do not keep this order (PostgreSQL's jsonb
    sorts keys), so pages order them by this list."""
    return [str(c.get("label") or c.get("name")) for c in _components(config)]


def scheduled_weights(config: dict[str, Any]) -> str:
    """What the Reward chart's help adds for a run whose weights move with the step
    (PARL anneals r_parallel and r_finish to 0): "r_parallel 0.3 → 0 and r_finish
    0.3 → 0 by step 100"; "" when every weight is constant. The total then falls
    as the weights do, with a policy no worse: a walk took the swarm demo for broken."""
    moves = []
    for c in _components(config):
        sched = c.get("schedule")
        if not isinstance(sched, dict) or sched.get("kind") != "linear":
            continue
        weight, end, steps = (
            c.get("weight", 1.0),
            sched.get("end", 0.0),
            sched.get("steps"),
        )
        if not all(isinstance(v, int | float) for v in (weight, end, steps)):
            continue
        name = str(c.get("label") or c.get("name"))
        moves.append((f"{name} {weight:g} → {end:g}", int(steps)))
    if not moves:
        return ""
    by = {steps for _, steps in moves}
    if len(by) == 1:
        return f"{' and '.join(m for m, _ in moves)} by step {by.pop()}"
    return " and ".join(f"{m} by step {steps}" for m, steps in moves)


def env_name(config: Any) -> str:
    """The environment a run's config names; "" where it names none as this trainer
    does (an external run's config is any JSON: ``"env": "gsm8k"`` among them)."""
    env = config.get("env") if isinstance(config, dict) else None
    name = env.get("name") if isinstance(env, dict) else None
    return name if isinstance(name, str) else ""


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
    except (TypeError, ValueError, OverflowError):
        return None


def _environment(config: dict[str, Any]):
    """The class of the run's environment; None when it is not registered here (a
    plugin this process has not loaded, an external run's name)."""
    name = env_name(config)
    return ENVIRONMENTS.get(name) if name in ENVIRONMENTS else None


def empty_text(chart_id: str, config: dict[str, Any]) -> str:
    """What a chart with no points says: why none will come, when that is known."""
    if chart_id == "kl" and _kl_beta(config) == 0.0:
        return "No KL penalty in this run (kl_beta = 0): KL is not computed."
    if chart_id == "critical":
        env = _environment(config)
        if env is not None and not env.orchestrates:
            return (
                "No sub-agents in this run: critical steps are counted for episodes "
                f"that fan out to sub-agents (the swarm environment); {env.name} "
                "episodes have none."
            )
    return "No data yet."


# Held-out evaluation (trainer.evaluate), on runs whose config has eval.every > 0.
EVAL_CHART = {
    "id": "eval",
    "title": "Held-out evaluation (reward, pass@k, success)",
    "keys": ["eval/reward", "eval/pass@k", "eval/success"],
}


def evaluates(config: dict[str, Any], metric_keys: list[str] | None = None) -> bool:
    ev = config.get("eval") if isinstance(config, dict) else None
    every = ev.get("every") if isinstance(ev, dict) else None
    if isinstance(every, int | float) and every > 0:  # "epoch" is not a step count
        return True
    return any(k.startswith("eval/") for k in metric_keys or [])


MAX_EXTRA_CHARTS = 16
KEYS_PER_EXTRA_CHART = 4


def family_charts(logged: list[str]) -> list[dict[str, Any]]:
    """A chart per family of ``trainer.metric_names.FAMILIES`` that ``logged`` has a
    name of, plotting those names (sorted)."""
    out = []
    for cid, title, prefix in FAMILIES:
        keys = sorted(k for k in logged if k.startswith(prefix))
        if keys:
            out.append(
                {"id": cid, "title": title, "keys": keys, "empty": "No data yet."}
            )
    return out


def explained(chart: dict[str, Any]) -> dict[str, Any]:
    """``chart`` with its one line of help, axis titles and each key's meaning."""
    line, y_title = CHART_HELP.get(chart["id"], ("", ""))
    helps = {k: key_help(k) for k in chart["keys"]}
    if not line:  # a chart of whatever a run logged: say what we know of its names
        known = [f"{k}: {h}" for k, h in helps.items() if h]
        line = "; ".join(known) or "Metrics this run logged, as the trainer named them."
    return {
        **chart,
        "help": line,
        "x_title": X_TITLE,
        "y_title": y_title or "value",
        "key_help": helps,
    }


def run_charts(
    config: dict[str, Any],
    metric_keys: list[str] | None = None,
    *,
    logged: list[str] | None = None,
    reward: str = "reward",
) -> list[dict[str, Any]]:
    """The run page's charts. With ``metric_keys`` (an external run, whose config
    says nothing we can read), the components come from the logged
    ``rewards/<name>/mean`` keys, a standard chart is drawn only when one of its
    metrics was logged (none will come for the others; the legend lists a key once
    it has a point, static/js/chart.js), and every other logged
    metric gets a chart too, grouped by its prefix (``critic/``, ``actor/``...).
    ``logged`` (any run's stored metric names, ``metric_keys`` by default) decides
    the family charts. ``reward``: the stored name of the run's reward
    (:func:`dashboard.reads.reward_names.reward_key`: an external run's trainer may
    have logged ``train/reward``), which the Reward chart plots instead of ``reward``
    (with its ``_std`` beside it when logged), not a chart of its prefix. End-of-training summaries (``train_runtime``...) are not
    charted (the page lists them in a table). Each chart carries a line of help, its
    axis titles and what each of its keys means (issue 22.11)."""
    charts = [
        {"id": cid, "title": title, "keys": keys, "empty": empty_text(cid, config)}
        for cid, title, keys in STANDARD
    ]
    if reward != "reward":
        charts[0]["keys"] = reward_keys(reward, logged or metric_keys or [])
    families = family_charts(logged if logged is not None else metric_keys or [])
    if metric_keys is None:
        components = component_keys(config)
        charts += families
    else:
        logged_set = set(metric_keys)
        charts = [c for c in charts if logged_set.intersection(c["keys"])]
        charts += families
        components = [
            k
            for k in metric_keys
            if k.startswith("rewards/") and k.endswith("/mean") and k != reward
        ]
        drawn = [*charts, EVAL_CHART] if evaluates(config, metric_keys) else charts
        charts += _extra_charts(metric_keys, drawn, components)
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
    if evaluates(config, metric_keys):  # beside the training reward it validates
        charts.insert(2 if components else 1, dict(EVAL_CHART))
    charts = [explained(c) for c in charts]
    moving = scheduled_weights(config) if metric_keys is None else ""
    if moving and charts and charts[0]["id"] == "reward":
        charts[0]["help"] += (
            f" Its weights move with the step ({moving}), so the total moves with "
            "them, with a policy no worse: the components chart shows each part."
        )
    return charts


def _extra_charts(
    metric_keys: list[str], charts: list[dict[str, Any]], components: list[str]
) -> list[dict[str, Any]]:
    shown = {k for c in charts for k in c["keys"]} | set(components)
    groups: dict[str, list[str]] = {}
    for key in metric_keys:
        if key not in shown and not is_summary(key):  # a table, not a series
            groups.setdefault(key.split("/", 1)[0] if "/" in key else "", []).append(
                key
            )
    extra = []
    for prefix in sorted(groups):
        keys = sorted(groups[prefix])
        for i in range(0, len(keys), KEYS_PER_EXTRA_CHART):
            part = keys[i : i + KEYS_PER_EXTRA_CHART]
            title = f"{prefix}/" if prefix else "Other metrics"
            if len(keys) > KEYS_PER_EXTRA_CHART:
                title += f" ({i // KEYS_PER_EXTRA_CHART + 1})"
            extra.append(
                {
                    "id": extra_id(prefix, i // KEYS_PER_EXTRA_CHART),
                    "title": title,
                    "keys": part,
                    "empty": "No data yet.",
                }
            )
    return extra[:MAX_EXTRA_CHARTS]


_SLUG = re.compile(r"[a-z0-9_]{1,40}")


def extra_id(prefix: str, part: int) -> str:
    """A chart of a prefix's metrics, by its prefix, not its place: a prefix first
    sent later (sorted before it) moved ``extra-N`` ids along, and a log-scale choice
    kept for an id with them. A plain prefix reads as itself (``extra-critic``);
    another (a client's names are anything) by a hash (``extra-x-1a2b3c4d``), the
    part after the first of a long group numbered (``extra-critic-2``).

    >>> extra_id("critic", 0), extra_id("critic", 1), extra_id("", 0)
    ('extra-critic', 'extra-critic-2', 'extra-other')
    >>> extra_id("<img src=x>", 0)
    'extra-x-f4285014'
    """
    if prefix == "":  # names without a "/": "Other metrics"
        base = "extra-other"
    elif _SLUG.fullmatch(prefix) and prefix != "other":  # "other/" is hashed
        base = f"extra-{prefix}"
    else:
        base = f"extra-x-{hashlib.sha1(prefix.encode()).hexdigest()[:8]}"
    return base + (f"-{part + 1}" if part else "")


def reward_keys(reward: str, logged: list[str]) -> list[str]:
    """The Reward chart's keys for a reward stored as ``reward``: it, and its
    spread as the same trainer names it (``train/reward_std``) when logged."""
    spread = [f"{reward}_std", reward.replace("mean", "std")]
    return [reward, *(k for k in dict.fromkeys(spread) if k != reward and k in logged)]


def summary_rows(values: dict[str, tuple[int, float | None]]) -> list[dict[str, Any]]:
    """The run's end-of-training summaries (``values``: key -> (step, value), as
    ``reads.metrics.latest_values`` reads them), as rows of the run page's table."""
    rows = []
    for key in sorted(k for k in values if is_summary(k)):
        step, value = values[key]
        label = SUMMARY_LABELS.get(key.removeprefix("train/"), key)
        rows.append({"key": key, "label": label, "value": value, "step": step})
    return rows
