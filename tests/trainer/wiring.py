"""Helpers for the option wiring tests: a tiny run through ``trainer.loop.train`` and
what it recorded (per-token arrays, the weights and the optimizer state it ended
with), plus the policy the run started from, to work numbers out by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from rewards.types import RewardBreakdown, RewardResult
from trainer.algorithms import resolve_algorithm
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.policy import Policy


def varied_reward(episodes, step):
    """Rewards that differ within a group and between steps of one rollout (so every
    advantage estimator has something to work on), deterministic per episode: a step
    earns ``(sum of its action's character codes mod 5) / 4``."""
    out = []
    for ep in episodes:
        per = tuple((sum(map(ord, s.action)) % 5) / 4 for s in ep.steps) or (0.0,)
        total = math.fsum(per)
        out.append(
            RewardResult(RewardBreakdown(total, {"shape": total}, {"shape": per}))
        )
    return out


def zero_reward(episodes, step):
    """Every rollout earns 0: every group has zero variance."""
    return [
        RewardResult(RewardBreakdown(0.0, {"shape": 0.0}, {"shape": (0.0,)}))
        for _ in episodes
    ]


def tiny(**over: Any) -> TrainConfig:
    """A config of a few seconds on CPU: 2 tasks x 3 rollouts, 2 turns, every
    trajectory recorded with its token arrays. ``over``: sections merged in."""
    base: dict[str, Any] = {
        "steps": 1,
        "env": {"name": "calc"},
        "model": {"device": "cpu"},
        "rollout": {
            "tasks_per_step": 2,
            "group_size": 3,
            "max_turns": 2,
            "max_action_tokens": 6,
        },
        "algorithm": {"preset": "grpo"},
        "record": {"every": 1, "groups": None, "token_arrays": True},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return TrainConfig.model_validate(base)


@dataclass
class Ran:
    """One finished run: its config, events and last checkpoint."""

    config: TrainConfig
    sink: ListSink
    checkpoint: Path

    def metrics(self, step: int | None = None) -> dict[str, float]:
        steps = {e["step"]: e["metrics"] for e in self.sink.of_type("step")}
        return steps[max(steps) if step is None else step]

    def every_metrics(self) -> list[dict[str, float]]:
        return [e["metrics"] for e in self.sink.of_type("step")]

    def trajectories(self, step: int = 1) -> list[dict[str, Any]]:
        return [t for t in self.sink.of_type("trajectory") if t["step"] == step]

    def weights(self) -> dict[str, torch.Tensor]:
        return load_file(str(self.checkpoint / "policy.safetensors"))

    def optimizer_state(self) -> dict[int, dict[str, torch.Tensor]]:
        blob = torch.load(self.checkpoint / "state.pt", weights_only=True)
        return blob["optimizer"]["state"]


def run(cfg: TrainConfig, tmp_path: Path, reward_fn=varied_reward) -> Ran:
    """Train ``cfg`` with a checkpoint after the last step; the run must succeed."""
    sink = ListSink()
    out = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}"
    result = train(
        cfg, make_env("calc", seed=cfg.seed), reward_fn, sink, checkpoint_dir=out
    )
    assert result.status == "succeeded", result
    ckpts = sorted(out.glob("step-*"))
    return Ran(cfg, sink, ckpts[-1])


def stopped_and_resumed(
    cfg: TrainConfig, out: Path, stop_after: int, reward_fn=varied_reward
) -> Ran:
    """Train ``cfg`` into ``out``, stopped after ``stop_after`` steps, then resumed
    from its checkpoint to the end; the resumed run's events and last checkpoint."""
    first = ListSink()
    stopped = train(
        cfg,
        make_env("calc", seed=cfg.seed),
        reward_fn,
        first,
        checkpoint_dir=out,
        should_stop=lambda: len(first.of_type("step")) >= stop_after,
    )
    assert (stopped.status, stopped.last_step) == ("cancelled", stop_after)
    second = ListSink()
    resumed = train(
        cfg, make_env("calc", seed=cfg.seed), reward_fn, second, checkpoint_dir=out
    )
    assert resumed.status == "succeeded", resumed
    return Ran(cfg, second, sorted(out.glob("step-*"))[-1])


def initial_policy(cfg: TrainConfig) -> Policy:
    """The policy ``train`` starts from (no warm start): the same seed, the same build."""
    env = make_env("calc", seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    policy = Policy.build(
        cfg.model,
        env.vocabulary(),
        with_value_head=resolve_algorithm(cfg.algorithm).needs_value_head,
        max_positions=max(2048, cfg.rollout.max_total_tokens + 8),
        temperature=cfg.rollout.temperature,
    )
    return policy.eval()


@dataclass(frozen=True)
class Token:
    """One token of a recorded trajectory and its arrays (None: not scored)."""

    id: int
    mask: str | None
    turn: int
    logprob: float | None
    old_logprob: float | None
    ratio: float | None
    entropy: float | None
    advantage: float | None

    @property
    def trained(self) -> bool:
        return self.mask is None


def tokens(traj: dict[str, Any]) -> list[Token]:
    out = []
    for seg in traj["segments"]:
        for k, tid in enumerate(seg["token_ids"]):
            out.append(
                Token(
                    tid,
                    seg["mask"],
                    seg["turn"],
                    *(
                        seg[n][k]
                        for n in (
                            "logprob",
                            "old_logprob",
                            "ratio",
                            "entropy",
                            "advantage",
                        )
                    ),
                )
            )
    return out


def trained(traj: dict[str, Any]) -> list[Token]:
    return [t for t in tokens(traj) if t.trained]


@torch.no_grad()
def logprobs_of(policy: Policy, traj: dict[str, Any]) -> list[float | None]:
    """``policy``'s log-prob of every token of ``traj`` (None for the first)."""
    ids = torch.tensor([[t.id for t in tokens(traj)]])
    lp = policy.token_stats(ids, torch.ones_like(ids)).logprobs[0]
    return [None, *lp.tolist()]


@torch.no_grad()
def values_of(policy: Policy, traj: dict[str, Any]) -> list[float | None]:
    """The value head's value of the state before every token (None for the first)."""
    ids = torch.tensor([[t.id for t in tokens(traj)]])
    st = policy.token_stats(ids, torch.ones_like(ids), with_values=True)
    return [None, *st.values[0].tolist()]


def by_group(trajs: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """A step's trajectory events by group, each group's in index order."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for t in sorted(trajs, key=lambda t: (t["group"], t["index"])):
        groups.setdefault(t["group"], []).append(t)
    return groups


def seq_mean(rows: list[list[float]]) -> float:
    """GRPO's aggregation: mean per sequence, then over sequences with tokens."""
    means = [math.fsum(r) / len(r) for r in rows if r]
    return math.fsum(means) / len(means)


def token_mean(rows: list[list[float]]) -> float:
    flat = [x for r in rows for x in r]
    return math.fsum(flat) / len(flat)
