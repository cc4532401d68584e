"""What each metric means in RL terms, for people reading a run's charts (issue 22.11),
and which names are end-of-training summaries rather than series (issue 22.10d).

``HELP`` explains our names (those of :mod:`trainer.metric_names`, TRL's and verl's
where they agree); ``CHART_HELP`` gives each chart of the run page one line and the
title of its y axis. ``SUMMARY_KEYS`` are the values transformers' ``Trainer`` logs
once when ``train()`` returns (TRL inherits them): plotting them draws one lonely point,
so the run page lists them in a table instead.

Pure data: no Django.
"""

from __future__ import annotations

HELP: dict[str, str] = {
    "reward": "mean total reward of the step's rollouts (weighted components)",
    "reward_std": "spread of rewards within a group: zero means no learning signal",
    "frac_reward_zero_std": (
        "share of groups whose rewards were all equal: no learning signal from them"
    ),
    "groups_dropped": "groups filtered out for zero reward variance (DAPO's filter)",
    "advantages/mean": "mean advantage (about 0 for group-relative advantages)",
    "advantages/min": "most negative advantage: the rollout pushed down hardest",
    "advantages/max": "most positive advantage: the rollout pushed up hardest",
    "kl": "KL divergence of the policy from the frozen reference (k3 estimate)",
    "kl/coef": "the KL penalty's coefficient beta (adaptive when a target is set)",
    "entropy": "mean per-token entropy of the policy: falling fast means collapse",
    "clip_ratio/low_mean": "share of tokens clipped at 1 - clip_low (ratio too small)",
    "clip_ratio/high_mean": "share of tokens clipped at 1 + clip_high (ratio too big)",
    "clip_ratio/region_mean": "share of tokens whose ratio left the trust region",
    "completions/mean_length": "mean generated tokens per rollout",
    "num_turns": "mean agent turns per rollout",
    "critical_steps/mean": "orchestrator steps plus the slowest sub-agent per stage",
    "total_steps/mean": "all agent steps of a rollout, sub-agents included",
    "parallelism/mean": (
        "sub-agents launched per fan-out stage (0 for an episode that launched none): "
        "1 is one at a time"
    ),
    "proxy_reward/mean": (
        "what the terms that do not verify the task paid (format, judge, bonuses): "
        "rising while success does not is reward hacking"
    ),
    "repetition/mean": (
        "share of a rollout's word pairs that repeat one it already wrote: "
        "rising means degenerate output"
    ),
    "perf/tokens_per_s": "tokens generated and trained per second of wall time",
    "loss": "total loss minimised (policy loss plus KL and other terms)",
    "policy_loss": "the clipped surrogate (policy-gradient) loss alone",
    "grad_norm": "gradient norm before clipping: spikes mean unstable updates",
    "lr": "learning rate of the optimiser at this step",
    "rollout/logprob_diff": "sampler's log-probs minus the learner's, per token",
    "rollout/ratio_mean": "mean importance ratio learner/sampler (1 = on-policy)",
    "off_policy/staleness": "policy versions between sampling and training",
    "eval/reward": "mean reward on held-out tasks (no training on them)",
    "eval/pass@k": "share of held-out tasks solved in at least one of k samples",
    "eval/success": "share of held-out rollouts that solved their task",
}

# chart id -> (one line of help, y axis title)
CHART_HELP: dict[str, tuple[str, str]] = {
    "reward": (
        "Mean reward per step and its spread within groups (reward_std 0: "
        "all siblings scored alike, nothing to learn from).",
        "reward",
    ),
    "components": (
        "Each reward component's mean per step, already weighted: what the total "
        "is made of.",
        "weighted reward",
    ),
    "eval": (
        "The policy on held-out tasks: rising training reward with flat held-out "
        "reward means overfitting or reward hacking.",
        "score",
    ),
    "advantages": (
        "Advantages push rollouts up (positive) or down (negative); group-relative "
        "ones average about 0.",
        "advantage",
    ),
    "kl": (
        "How far the policy moved from the frozen reference; beta weighs it in "
        "the loss.",
        "nats per token",
    ),
    "entropy": (
        "Per-token entropy of the policy: a steady fall is sharpening, a collapse "
        "to 0 ends exploration.",
        "nats per token",
    ),
    "clip": (
        "Share of tokens whose importance ratio was clipped: high values mean "
        "updates larger than the trust region.",
        "share of tokens",
    ),
    "lengths": (
        "Generated tokens and agent turns per rollout: sudden growth can be "
        "length hacking.",
        "tokens / turns",
    ),
    "critical": (
        "Critical steps (the latency path: orchestrator steps plus each stage's "
        "slowest sub-agent) against all steps; parallelism: sub-agents per stage "
        "that fanned out, 0 for an episode that launched none (a mean under 1 is "
        "mostly episodes without sub-agents).",
        "steps / sub-agents",
    ),
    "dropped": (
        "Groups whose rewards were all equal give no learning signal "
        "(frac_reward_zero_std: their share).",
        "groups / share",
    ),
    "sampler": (
        "The sampler's log-probs against the learner's: off-policy drift between "
        "generation and training.",
        "log-prob / ratio",
    ),
    "throughput": ("Tokens generated and trained per second of wall time.", "tokens/s"),
    "loss": (
        "The loss the optimiser minimised (loss: all terms, policy_loss: the "
        "surrogate alone) and the gradient norm.",
        "loss / norm",
    ),
    "staleness": (
        "How many policy versions old the trained samples were (async trainers).",
        "policy versions",
    ),
    "mismatch": (
        "The trainer's log-probs against the inference engine's for the same "
        "tokens: should stay near 0.",
        "difference",
    ),
}

# transformers' Trainer.train() logs these once, at the end (TrainOutput metrics).
SUMMARY_KEYS: tuple[str, ...] = (
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "train_loss",
    "total_flos",
)

SUMMARY_LABELS: dict[str, str] = {
    "train_runtime": "training time (s)",
    "train_samples_per_second": "samples per second",
    "train_steps_per_second": "steps per second",
    "train_loss": "mean training loss over the run",
    "total_flos": "floating-point operations",
}


def is_summary(key: str) -> bool:
    """Whether ``key`` (a ``train/`` prefix allowed) is an end-of-training summary."""
    return key.removeprefix("train/") in SUMMARY_KEYS


def key_help(key: str) -> str:
    """One line about ``key``: its entry in :data:`HELP`, a reward component's line, or
    empty for a name we know nothing about."""
    if key in HELP:
        return HELP[key]
    if key.startswith("rewards/") and key.endswith("/mean"):
        return f"mean of reward component {key[8:-5]!r} per step"
    return ""
