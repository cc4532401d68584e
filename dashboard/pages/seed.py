"""Synthetic runs in the trainer's event shapes, for page tests, the UI benchmark and
browser tests: metrics, trajectories (with token arrays), judgements, critical paths
and alerts, written through the platform's own ingestion (``dashboard.ingest.writer``) so the
rows are exactly what a real run leaves.

:data:`XSS_PAYLOADS` are script-injection strings; ``payloads=True`` puts them into
every place model text reaches a page (actions, tool output, sub-agent results,
token strings, task ids, judge rationales, alert messages, run names).
``dashboard.pages.scripted.scripted_trainer`` streams such events live.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from dashboard.ingest import writer
from dashboard.models import Run
from dashboard.pages.payloads import XSS_PAYLOADS

WORDS = [
    "search",
    "read",
    "prune",
    "answer",
    "spawn",
    "solve",
    "finish",
    "the",
    "a",
    "of",
    "company",
    "city",
    "founder",
    "doc",
]
STANDARD_KEYS = (
    "reward_std",
    "advantages/mean",
    "advantages/min",
    "advantages/max",
    "kl",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "completions/mean_length",
    "num_turns",
    "critical_steps/mean",
    "total_steps/mean",
    "parallelism/mean",
    "groups_dropped",
    "frac_reward_zero_std",
    "perf/tokens_per_s",
    "policy_loss",
    "grad_norm",
)


def valid_config(
    env: str = "swarm", preset: str = "dr_grpo", steps: int = 50, **extra: Any
) -> dict[str, Any]:
    from dashboard.pages.forms import normalise
    from trainer.config import TrainConfig

    data = {
        "name": extra.pop("name", "seeded"),
        "steps": steps,
        "env": {"name": env},
        "algorithm": {"preset": preset},
        **extra,
    }
    return normalise(TrainConfig.model_validate(data).model_dump(mode="json"))


def component_names(config: dict[str, Any]) -> list[str]:
    return [c.get("label") or c["name"] for c in config["reward"]["components"]]


def step_metrics(
    step: int, total: int, components: list[str], rng: random.Random
) -> dict[str, float]:
    progress = step / max(1, total)
    reward = 0.2 + 0.6 * progress + rng.gauss(0, 0.05)
    out = {"reward": reward}
    for key in STANDARD_KEYS:
        out[key] = abs(rng.gauss(1.0, 0.3)) * (1 + progress)
    out["advantages/min"], out["advantages/max"] = (
        -out["advantages/min"],
        out["advantages/max"],
    )
    for i, name in enumerate(components):
        out[f"rewards/{name}/mean"] = reward / (i + 1.5)
    return out


@dataclass
class TextSource:
    """Where trajectory text comes from: words, or the XSS payloads in rotation."""

    payloads: bool = False
    i: int = 0

    def text(self, rng: random.Random, n: int) -> str:
        if self.payloads:
            self.i += 1
            return XSS_PAYLOADS[self.i % len(XSS_PAYLOADS)]
        return " ".join(rng.choice(WORDS) for _ in range(n))


def _segment(
    turn: int,
    kind: str,
    text: str,
    mask: str | None,
    adv: float,
    rng: random.Random,
    tokens: int | None = None,
) -> dict[str, Any]:
    words = (
        text.split(" ")
        if tokens is None
        else [rng.choice(WORDS) for _ in range(tokens)]
    )
    if tokens is not None:
        text = " ".join(words)
    n = len(words)
    lp = [-abs(rng.gauss(2, 1)) for _ in range(n)]
    old = [v + rng.gauss(0, 0.05) for v in lp]
    return {
        "turn": turn,
        "kind": kind,
        "text": text,
        "token_ids": list(range(n)),
        "tokens": words,
        "logprob": lp,
        "old_logprob": old,
        "ratio": [math.exp(a - b) for a, b in zip(lp, old, strict=True)],
        "entropy": [abs(rng.gauss(2, 0.5)) for _ in range(n)],
        "advantage": [adv + rng.gauss(0, abs(adv) * 0.3 + 0.01) for _ in range(n)],
        "mask": mask,
    }


def trajectory_events(
    step: int,
    group: int,
    index: int,
    config: dict[str, Any],
    rng: random.Random,
    src: TextSource,
    *,
    turns: int = 3,
    tokens: int | None = None,
    task: str | None = None,
) -> list[dict[str, Any]]:
    """One rollout: its trajectory, a judgement and (swarm) its critical path."""
    env = config["env"]["name"]
    names = component_names(config)
    adv = rng.gauss(0, 1)
    obs_kind = "subagent" if env == "swarm" else "tool"
    segments = [_segment(0, "prompt", src.text(rng, 6), "prompt", math.nan, rng)]
    agent_steps = []
    stages = []
    for turn in range(turns):
        action, observation = src.text(rng, 5), src.text(rng, 8)
        per_turn_tokens = None if tokens is None else max(1, tokens // (2 * turns))
        segments.append(
            _segment(turn, "action", action, None, adv, rng, per_turn_tokens)
        )
        segments.append(
            _segment(turn, obs_kind, observation, obs_kind, adv, rng, per_turn_tokens)
        )
        agent_steps.append(
            {
                "index": turn,
                "tool": action.split(" ")[0],
                "ok": True,
                "action": segments[-2]["text"],
                "observation": segments[-1]["text"],
                "facts": {},
            }
        )
        subs = [
            {
                "subtask": "abcdef"[k],
                "steps": rng.randint(2, 6),
                "success": rng.random() > 0.2,
            }
            for k in range(rng.randint(0, 3))
        ]
        stages.append({"orchestrator_steps": 1, "subagents": subs})
    per_step = {
        n: [round(rng.uniform(-0.2, 0.5), 4) for _ in range(turns)] for n in names
    }
    components = {n: math.fsum(v) for n, v in per_step.items()}
    total = math.fsum(components.values())
    length = sum(len(s["tokens"]) for s in segments if s["kind"] == "action")
    events: list[dict[str, Any]] = [
        {
            "type": "trajectory",
            "step": step,
            "group": group,
            "index": index,
            "task_id": task or (src.text(rng, 1) if src.payloads else f"task-{group}"),
            "dropped": group % 5 == 4,
            "reward": total,
            "advantage": adv,
            "rewards": {"total": total, "components": components, "per_step": per_step},
            "num_turns": turns,
            "length": length,
            "truncated": False,
            "facts": {"stages": stages, "success": total > 0.5},
            "steps": agent_steps,
            "segments": segments,
        }
    ]
    events.append(
        {
            "type": "judgement",
            "step": step,
            "group": group,
            "index": index,
            "judge": "rules",
            "backend": "rubric",
            "ok": True,
            "score": rng.random(),
            "scores": {"decomposition": rng.random(), "answer_given": rng.random()},
            "rationale": f"rule-based: {src.text(rng, 10)}",
            "raw": None,
            "error": None,
            "target_step": index % turns,
        }
    )
    if env == "swarm":
        from rewards import critical_path

        cp = critical_path(
            [
                (s["orchestrator_steps"], [a["steps"] for a in s["subagents"]])
                for s in stages
            ]
        )
        events.append(
            {
                "type": "critical_path",
                "step": step,
                "group": group,
                "index": index,
                "stages": stages,
                "critical_steps": cp["critical_steps"],
                "total_steps": cp["total_steps"],
                "path": cp["path"],
            }
        )
    return events


def step_events(
    step: int,
    config: dict[str, Any],
    rng: random.Random,
    src: TextSource,
    *,
    groups: int = 2,
    group_size: int = 4,
    with_trajectories: bool = True,
    alert_every: int = 0,
    tokens: int | None = None,
) -> Iterator[dict[str, Any]]:
    yield {
        "type": "step",
        "step": step,
        "metrics": step_metrics(step, config["steps"], component_names(config), rng),
    }
    if with_trajectories:
        for g in range(groups):
            for i in range(group_size):
                yield from trajectory_events(
                    step,
                    g,
                    i,
                    config,
                    rng,
                    src,
                    task=None if src.payloads else f"task-{step}-{g}",
                    tokens=tokens,
                )
    if alert_every and step % alert_every == 0:
        yield {
            "type": "alert",
            "step": step,
            "detector": "serial_collapse",
            "severity": "warning",
            "message": f"serial collapse at step {step}: {src.text(rng, 6)}",
            "evidence": {"parallelism": 1.0},
        }


def write_events(run: Run, events: Iterator[dict[str, Any]], chunk: int = 2000) -> int:
    """Ingest ``events`` in batches, as the run sink does; returns the last step."""
    last = 0
    batch = writer.Batch()
    for ev in events:
        batch.add(run.pk, ev)
        last = max(last, int(ev.get("step", 0)))
        if len(batch) >= chunk:
            with transaction.atomic():
                writer.write(run.pk, batch)
            batch = writer.Batch()
    if len(batch):
        with transaction.atomic():
            writer.write(run.pk, batch)
    return last


def seed_run(
    owner: Any,
    *,
    name: str = "seeded run",
    env: str = "swarm",
    preset: str = "dr_grpo",
    steps: int = 30,
    done: int | None = None,
    status: str = "succeeded",
    payloads: bool = False,
    seed: int = 0,
    groups: int = 2,
    group_size: int = 4,
    alert_every: int = 10,
    parent: Run | None = None,
    config: dict[str, Any] | None = None,
    tokens: int | None = None,
) -> Run:
    """A run with ``done`` steps of metrics, trajectories, judgements and alerts."""
    config = config or valid_config(env, preset, steps, name=name)
    run = Run.objects.create(
        owner=owner,
        name=name,
        config=config,
        status=status,
        parent=parent,
        started_at=timezone.now(),
        finished_at=timezone.now() if status not in ("queued", "running") else None,
    )
    rng = random.Random(seed)
    src = TextSource(payloads)
    done = config["steps"] if done is None else done

    def events() -> Iterator[dict[str, Any]]:
        for step in range(1, done + 1):
            yield from step_events(
                step,
                config,
                rng,
                src,
                groups=groups,
                group_size=group_size,
                alert_every=alert_every,
                tokens=tokens,
            )

    run.last_step = write_events(run, events())
    run.save(update_fields=["last_step"])
    return run
