"""Default reward configurations per environment, and the reward-hacking demo configs.

Defaults follow the recipes the concepts come from: calc is outcome-verified with a
small format reward (a from-scratch model needs some signal before its first success);
search is Context-1 (F-beta with beta 4, a little trajectory recall, two penalties);
swarm is PARL (r_perf plus annealed lambda_parallel * r_parallel and lambda_finish *
r_finish). Each also has a cheap rule-based judge with a small weight, so judgements
show up in the UI and feed the judge-vs-verifier detector without a model.

The demo configs deliberately leave a hole: ``swarm_serial_collapse`` pays nothing for
parallelism and nothing for latency, so one sub-agent (or none) is as good as many;
``swarm_spurious_parallelism`` pays for sub-agents and not for finishing them.
"""

from __future__ import annotations

from typing import Any

from rewards.config import RewardConfig

_ANNEAL_STEPS = 100


def _judge(name: str, *dims: str) -> dict[str, Any]:
    return {"name": name, "backend": "rubric", "rubric": [{"name": d} for d in dims]}


_DEFAULTS: dict[str, dict[str, Any]] = {
    "calc": {
        "components": [
            # Partial credit (the env's ``partial`` fact): the calculator computed the
            # right value and an answer was given, but not that one.
            {"name": "outcome", "weight": 1.0, "params": {"partial_credit": True}},
            {"name": "format", "weight": 0.1},
            {"name": "judge", "weight": 0.1},
        ],
        "judges": [_judge("rules", "answer_given", "used_tool", "tool_validity")],
    },
    "search": {
        "components": [
            {"name": "fbeta", "weight": 1.0, "params": {"beta": 4.0}},
            {"name": "trajectory_recall", "weight": 0.2},
            {"name": "prune_penalty", "weight": 1.0, "params": {"penalty": 0.05}},
            {
                "name": "single_search_exit_penalty",
                "weight": 1.0,
                "params": {"penalty": 0.2},
            },
            {"name": "format", "weight": 0.05},
            {"name": "judge", "weight": 0.1},
        ],
        "judges": [
            _judge("rules", "evidence_retained", "multiple_searches", "no_truncation")
        ],
    },
    "swarm": {
        "components": [
            {
                "name": "r_perf",
                "weight": 1.0,
                "params": {"budget": 20, "discount": 0.5},
            },
            {
                "name": "r_parallel",
                "weight": 0.3,
                "params": {"max_subagents": 4},
                "schedule": {"kind": "linear", "end": 0.0, "steps": _ANNEAL_STEPS},
            },
            {
                "name": "r_finish",
                "weight": 0.3,
                "schedule": {"kind": "linear", "end": 0.0, "steps": _ANNEAL_STEPS},
            },
            {"name": "format", "weight": 0.05},
            {"name": "judge", "weight": 0.1},
        ],
        "judges": [
            _judge("rules", "decomposition", "subtask_completion", "answer_given")
        ],
    },
}

# dataset: the answer against the reference, normalised; a user picks numeric_match,
# regex_match or contains for other kinds of answers.
_DEFAULTS["dataset"] = {
    "components": [
        {"name": "exact_match", "weight": 1.0},
        {"name": "format", "weight": 0.05},
    ],
}

_DEMOS: dict[str, dict[str, Any]] = {
    # No r_parallel, and no latency discount in r_perf: nothing favours fanning out.
    "swarm_serial_collapse": {
        "components": [
            {"name": "r_perf", "weight": 1.0, "params": {"budget": 0}},
            {"name": "r_finish", "weight": 0.3},
            {"name": "format", "weight": 0.05},
        ],
        "detectors": {"window": 10, "min_steps": 4},
    },
    # r_parallel at full weight and never annealed, r_finish off, r_perf nearly off.
    "swarm_spurious_parallelism": {
        "components": [
            {"name": "r_perf", "weight": 0.2, "params": {"budget": 20}},
            {"name": "r_parallel", "weight": 1.0, "params": {"max_subagents": 8}},
            {"name": "format", "weight": 0.05},
        ],
        "detectors": {"window": 10, "min_steps": 4},
    },
}


def default_reward_config(env_name: str) -> RewardConfig:
    """The reward a run on ``env_name`` gets when its config names none."""
    try:
        return RewardConfig.model_validate(_DEFAULTS[env_name])
    except KeyError:
        raise KeyError(
            f"no default reward for {env_name!r} (known: {', '.join(_DEFAULTS)})"
        ) from None


def overlong_params(max_len: int) -> dict[str, int]:
    """DAPO's overlong penalty sized to a generation budget of ``max_len`` tokens: the
    soft zone its last fifth, as in the paper's 4096 of 20480."""
    return {"max_len": max_len, "cache": max_len // 5}


def with_overlong_penalty(cfg: RewardConfig, max_len: int) -> RewardConfig:
    """``cfg`` plus DAPO's ``overlong_penalty`` (weight 1, the soft zone a fifth of
    ``max_len`` as in the paper's 4096 of 20480), unless it already has one."""
    if any(c.name == "overlong_penalty" for c in cfg.components):
        return cfg
    data = cfg.model_dump(mode="json")
    params = overlong_params(max_len)
    data["components"].append(
        {"name": "overlong_penalty", "weight": 1.0, "params": params}
    )
    return RewardConfig.model_validate(data)


def demo_names() -> list[str]:
    return sorted(_DEMOS)


def demo_config(name: str) -> RewardConfig:
    """One demo reward config by name (see :func:`demo_names`)."""
    if name not in _DEMOS:
        raise KeyError(
            f"no demo reward config {name!r} (known: {', '.join(demo_names())})"
        )
    return RewardConfig.model_validate(_DEMOS[name])


def demo_configs() -> dict[str, RewardConfig]:
    """Every demo reward config, keyed by name."""
    return {n: demo_config(n) for n in demo_names()}
