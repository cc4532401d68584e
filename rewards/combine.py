"""Combine: a weighted sum of named components, attributed per step.

``R = sum_i w_i(step) * c_i`` with ``w_i`` from each component's schedule. A result
carries the total, each component's weighted total, and each component per step; the
per-step values are what the totals are summed from, so they agree by construction.
Judges run once per batch (so a model-backed judge can batch) before the components.

The trainer only sees the returned :class:`rewards.types.RewardFn`; nothing here knows
about tokens, tensors or the database.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rewards.components import COMPONENTS, ComponentSpec, Context, slots
from rewards.config import ComponentConfig, RewardConfig
from rewards.facts import repetition
from rewards.judge_scores import aggregate, disagreement, usable
from rewards.judges import EndpointSpec, Judge, build_judges
from rewards.judges.base import ModelLoader, run_judges
from rewards.parl import critical_path, stage_metrics
from rewards.schedule import weight_at
from rewards.search import search_metrics
from rewards.types import Episode, Judgement, RewardBreakdown, RewardFn, RewardResult

# The PARL lambdas are the current weights of these components (Kimi K2.5 notation).
_LAMBDAS = {"r_parallel": "lambda_parallel", "r_finish": "lambda_finish"}


def check_reward_config(cfg: RewardConfig, env_name: str) -> list[str]:
    """Problems with using ``cfg`` on ``env_name``, as ``field.path: message`` lines
    (components that read facts the environment does not produce)."""
    errors = []
    for i, c in enumerate(cfg.components):
        envs = COMPONENTS.get(c.name).envs
        if envs is not None and env_name not in envs:
            need = ", ".join(sorted(envs))
            errors.append(
                f"components.{i}.{c.name}: reads {need} facts; "
                f"environment {env_name!r} does not produce them"
            )
    return errors


class RewardFunction:
    """The callable :func:`build_reward_fn` returns: ``(episodes, step) -> results``."""

    def __init__(
        self, cfg: RewardConfig, env_name: str, judges: Sequence[Judge]
    ) -> None:
        self.cfg = cfg
        self.env_name = env_name
        self.judges = list(judges)
        self._parts: list[tuple[ComponentConfig, ComponentSpec]] = [
            (c, COMPONENTS.get(c.name)) for c in cfg.components
        ]

    def weights(self, step: int) -> dict[str, float]:
        """Each component's scheduled weight at ``step``."""
        return {c.key: weight_at(c.weight, c.schedule, step) for c, _ in self._parts}

    def __call__(self, episodes: Sequence[Episode], step: int) -> list[RewardResult]:
        if self.judges:
            judged = run_judges(self.judges, episodes, self.cfg.judges)
        else:
            judged = [()] * len(episodes)
        weights = self.weights(step)
        return [
            self.score(ep, step, weights, js)
            for ep, js in zip(episodes, judged, strict=True)
        ]

    def score(
        self,
        ep: Episode,
        step: int,
        weights: Mapping[str, float],
        judgements: tuple[Judgement, ...],
    ) -> RewardResult:
        """One episode's breakdown, metrics and critical path."""
        ctx = Context(
            step=step, judgements=judgements, judge_aggregate=self.cfg.judge_aggregate
        )
        per_step: dict[str, tuple[float, ...]] = {}
        totals: dict[str, float] = {}
        for c, spec in self._parts:
            raw = spec.fn(ep, c.params, ctx)
            if len(raw) != slots(ep) or not all(math.isfinite(v) for v in raw):
                raise ValueError(
                    f"component {c.key!r} returned {raw!r} for {ep.num_steps} steps"
                )
            values = tuple(weights[c.key] * v for v in raw)
            per_step[c.key] = values
            totals[c.key] = math.fsum(values)
        breakdown = RewardBreakdown(
            total=math.fsum(totals.values()), components=totals, per_step=per_step
        )
        stages = ep.facts.get("stages")
        metrics = self.metrics(ep, weights, judgements)
        proxies = [totals[c.key] for c, spec in self._parts if spec.proxy]
        if proxies:  # what the terms that do not verify the task paid
            metrics["proxy_reward"] = math.fsum(proxies)
        return RewardResult(
            breakdown=breakdown,
            judgements=judgements,
            metrics=metrics,
            critical_path=critical_path(stages) if stages is not None else None,
        )

    def metrics(
        self,
        ep: Episode,
        weights: Mapping[str, float],
        judgements: tuple[Judgement, ...],
    ) -> dict[str, float]:
        """Scalars the trainer averages over the batch (``<name>/mean``). Keys that
        have no value for an episode are absent, never NaN."""
        out: dict[str, float] = {f"weight/{k}": w for k, w in weights.items()}
        for c, _ in self._parts:
            if c.name in _LAMBDAS:
                out.setdefault(_LAMBDAS[c.name], weights[c.key])
        if self.env_name == "swarm":  # a PARL run without r_parallel has lambda 0
            for lam in _LAMBDAS.values():
                out.setdefault(lam, 0.0)
        out["success"] = float(ep.facts.get("success") is True)
        out["truncated"] = float(bool(ep.facts.get("truncated")))
        out.update(stage_metrics(ep))
        out.update(search_metrics(ep))
        # Degenerate output (the same words over and over): absent without n-grams.
        rep = repetition([s.action for s in ep.steps])
        if rep is not None:
            out["repetition"] = rep
        if self.cfg.judges:
            out.update(judge_metrics(judgements, self.cfg.judge_aggregate))
        return out


def judge_metrics(judgements: Sequence[Judgement], how: str) -> dict[str, float]:
    """``judge/score`` (the aggregate; absent if every judge failed),
    ``judge/disagreement`` (max - min of usable scores), ``judge/failures`` (count),
    ``judge/all_failed`` (1.0 when no judge produced a usable score), and
    ``judge/<name>/score`` per usable judge."""
    score = aggregate(judgements, how)
    out = {
        "judge/disagreement": disagreement(judgements),
        "judge/failures": float(sum(not usable(j) for j in judgements)),
        "judge/all_failed": float(score is None),
    }
    if score is not None:
        out["judge/score"] = score
    for j in judgements:
        if usable(j):
            out[f"judge/{j.judge}/score"] = float(j.score or 0.0)
    return out


def build_reward_fn(
    cfg: RewardConfig,
    *,
    env_name: str,
    endpoints: Mapping[str, EndpointSpec] | None = None,
    judge_model_loader: ModelLoader | None = None,
) -> RewardFn:
    """The reward function for one run: ``(episodes, step) -> list[RewardResult]``.

    ``endpoints`` is the admin's allow-list for ``openai`` judges (by name);
    ``judge_model_loader`` (``path -> (model, tokenizer)``) overrides how ``hf`` judges
    load their model (default: local files only, cached per path). Raises ValueError
    when a component reads facts ``env_name`` does not produce.
    """
    errors = check_reward_config(cfg, env_name)
    if errors:
        raise ValueError("; ".join(errors))
    judges = build_judges(
        cfg.judges, endpoints=endpoints, model_loader=judge_model_loader
    )
    return RewardFunction(cfg, env_name, judges)
