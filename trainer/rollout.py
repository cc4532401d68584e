"""Multi-turn rollout: generate an action, step the environment, append the observation.

For a batch of tasks, G sessions per task are played in lock-step: every turn the
still-active sessions generate one action each in a single batched call, the
environment answers, and its observation is appended to that session's context. A
session ends when the environment says done, or is truncated by the turn or token
budget. Malformed actions are the environment's business (recorded as failed tool
calls); nothing here raises on model output.

Each rollout is kept as segments of token ids with a loss-mask reason: ``None`` for
the policy's own action tokens (trained on), ``"prompt"``, ``"tool"`` or
``"subagent"`` for everything the policy did not write, ``"truncated"`` for the
actions of a truncated rollout when the run masks those (``mask_truncated``).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field, replace

import torch

from rewards.types import Episode
from trainer.config import RolloutConfig
from trainer.envs.base import Environment, EnvSession, Task
from trainer.policy import Policy

log = logging.getLogger(__name__)
_SAID: set[str] = set()  # what _say_once has logged in this process


def _say_once(message: str) -> None:
    if message not in _SAID:
        _SAID.add(message)
        log.info(message)


@dataclass
class Segment:
    """A run of tokens of one kind within one turn. ``mask`` None: trained on.
    ``logprobs``: the sampler's log-prob of each token (sampled actions only)."""

    turn: int
    kind: str  # "prompt" | "action" | "tool" | "subagent"
    token_ids: list[int]
    mask: str | None
    logprobs: list[float] | None = None


@dataclass
class Rollout:
    """One trajectory: its segments, the environment's episode facts, and where it sits
    in the batch (``group`` = task slot, ``index`` = sample within the group)."""

    task: Task
    group: int
    index: int
    segments: list[Segment] = field(default_factory=list)
    episode: Episode | None = None
    truncated: bool = False

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def action_tokens(self) -> int:
        """Tokens the policy generated (trained on or not)."""
        return sum(len(s.token_ids) for s in self.segments if s.kind == "action")

    @property
    def num_turns(self) -> int:
        return sum(1 for s in self.segments if s.kind == "action")

    def step_index_per_token(self) -> list[int]:
        """For every token, the agent step (turn) it belongs to; prompt tokens get -1."""
        return [
            s.turn if s.kind != "prompt" else -1
            for s in self.segments
            for _ in s.token_ids
        ]


def prompt_ids(policy: Policy, task: Task) -> list[int]:
    """The task's prompt as the policy's renderer writes it (word grammar or chat
    template); ``task.messages``, when set, are the chat messages."""
    return policy.renderer.prompt(task.prompt, task.messages)


def observation_ids(policy: Policy, text: str, *, closed: bool = True) -> list[int]:
    """An observation after an action; ``closed``: the action ended with a stop
    token (not cut by its budget)."""
    return policy.renderer.observation(text, closed=closed)


def play(
    policy: Policy,
    env: Environment,
    tasks: list[Task],
    cfg: RolloutConfig,
    *,
    generator: torch.Generator,
    first_group: int = 0,
) -> list[Rollout]:
    """G rollouts of each task, batched across all sessions; returns B = len(tasks) * G.

    With an engine that plays whole episodes (``rollout.engine: continuous``,
    :mod:`trainer.engines.continuous`) an episode rejoins the decode batch as soon as
    its observation is back; otherwise every turn is one batched ``generate``."""
    sessions: list[EnvSession] = []
    rollouts: list[Rollout] = []
    contexts: list[list[int]] = []
    for g, task in enumerate(tasks):
        for i in range(cfg.group_size):
            sessions.append(env.start(task))
            ro = Rollout(task=task, group=first_group + g, index=i)
            ids = prompt_ids(policy, task)
            ro.segments.append(Segment(0, "prompt", ids, "prompt"))
            rollouts.append(ro)
            contexts.append(list(ids))
    if getattr(policy.engine, "continuous", False):
        driver = _Episodes(policy, cfg, sessions, rollouts, contexts)
        # 0 in the config: the engine's own defaults (ContinuousEngine.workers,
        # .slots); an environment not marked thread-safe steps on the decode thread.
        workers = (cfg.env_workers or None) if env.steps_in_threads else 0
        if cfg.env_workers and not env.steps_in_threads:
            _say_once(
                f"rollout.env_workers: the {type(env).__name__} environment does not "
                "declare steps_in_threads; its steps run on the decode thread"
            )
        driver.play(generator, workers=workers, slots=cfg.max_live_episodes or None)
    else:
        _lock_step(policy, cfg, sessions, rollouts, contexts, generator)
    for ro, sess in zip(rollouts, sessions, strict=True):
        ro.episode = _with_action_tokens(sess.episode(truncated=ro.truncated), ro)
    return rollouts


def _budget(cfg: RolloutConfig, context: list[int]) -> int:
    """Tokens the next action may take; <= 0: the context is full."""
    return min(cfg.max_action_tokens, cfg.max_total_tokens - len(context))


def _act(policy, ro: Rollout, ctx: list[int], turn: int, ids, lps) -> str:
    """Record an action; the text the environment reads."""
    ro.segments.append(Segment(turn, "action", ids, None, lps))
    ctx.extend(ids)
    return policy.renderer.action_text(ids)


def _observe(policy, cfg, ro: Rollout, ctx, turn: int, ids, result) -> list[int] | None:
    """Append the environment's answer to the action ``ids``; the observation's
    tokens, or None when the episode is over (done, or truncated by the budget)."""
    if result.done:
        return None
    closed = bool(ids) and ids[-1] in policy.stop_ids
    obs = observation_ids(policy, result.observation, closed=closed)
    if len(ctx) + len(obs) >= cfg.max_total_tokens:
        ro.truncated = True
        return None
    kind = result.observation_kind
    ro.segments.append(Segment(turn, kind, obs, kind))
    ctx.extend(obs)
    return obs


def _lock_step(policy, cfg, sessions, rollouts, contexts, generator) -> None:
    """Every turn, one batched ``generate`` over the active sessions, then every
    environment's step."""
    active = list(range(len(sessions)))
    for turn in range(cfg.max_turns):
        budgets = [_budget(cfg, contexts[i]) for i in active]
        # A session whose context is already full cannot act: it is truncated.
        for i, b in zip(list(active), budgets, strict=True):
            if b <= 0:
                rollouts[i].truncated = True
        pairs = [(i, b) for i, b in zip(active, budgets, strict=True) if b > 0]
        active = [i for i, _ in pairs]
        if not active:
            break
        sampler_lp: list[list[float]] = []
        actions = policy.generate(
            [contexts[i] for i in active],
            max_new_tokens=[b for _, b in pairs],
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            generator=generator,
            logprobs_out=sampler_lp,
        )
        still: list[int] = []
        for i, ids, lps in zip(active, actions, sampler_lp, strict=True):
            ro, ctx = rollouts[i], contexts[i]
            result = sessions[i].step(_act(policy, ro, ctx, turn, ids, lps))
            if _observe(policy, cfg, ro, ctx, turn, ids, result) is not None:
                still.append(i)
        active = still
    for i in active:  # out of turns without finishing
        rollouts[i].truncated = True


class _Episodes:
    """The rollout's side of continuous batching
    (:class:`trainer.engines.continuous.EpisodeDriver`): the same budgets,
    segments and truncation as the lock-step loop, turn by turn per episode.
    Only ``session.step`` runs on the engine's worker threads."""

    def __init__(self, policy, cfg, sessions, rollouts, contexts) -> None:
        self.policy, self.cfg = policy, cfg
        self.sessions, self.rollouts, self.contexts = sessions, rollouts, contexts
        self.turn = [0] * len(sessions)
        self.actions: list[list[int]] = [[] for _ in sessions]

    def play(
        self, generator: torch.Generator, workers: int | None, slots: int | None
    ) -> None:
        from trainer.engines.continuous import episode_generators

        engine = self.policy.engine
        if engine.asleep:  # evaluation or a what-if between two rollouts
            engine.wake()
        engine.run_episodes(
            self,
            episode_generators(generator, len(self.sessions)),
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            workers=workers,
            slots=slots,
        )

    def _next(self, e: int, tokens: list[int]):
        budget = _budget(self.cfg, self.contexts[e])
        if budget <= 0:  # the context is full: it cannot act
            self.rollouts[e].truncated = True
            return None
        return tokens, budget

    def begin(self, e: int):
        return self._next(e, self.contexts[e])

    def act(self, e: int, tokens: list[int], logprobs: list[float]):
        ro, ctx = self.rollouts[e], self.contexts[e]
        text = _act(self.policy, ro, ctx, self.turn[e], tokens, logprobs)
        self.actions[e] = tokens
        session = self.sessions[e]
        return lambda: session.step(text)

    def resume(self, e: int, result):
        ro, ctx, turn = self.rollouts[e], self.contexts[e], self.turn[e]
        obs = _observe(self.policy, self.cfg, ro, ctx, turn, self.actions[e], result)
        if obs is None:
            return None
        self.turn[e] += 1
        if self.turn[e] >= self.cfg.max_turns:  # out of turns without finishing
            ro.truncated = True
            return None
        return self._next(e, obs)


def mask_truncated(rollouts: list[Rollout]) -> None:
    """DAPO's overlong filtering (arXiv 2503.14476 §3.4): the actions of a truncated
    rollout get the loss-mask reason ``"truncated"``, so the batch trains none of
    their tokens and the trajectory's record says why."""
    for ro in rollouts:
        if ro.truncated:
            for seg in ro.segments:
                if seg.mask is None:
                    seg.mask = "truncated"


def _with_action_tokens(ep: Episode, ro: Rollout) -> Episode:
    """The episode with ``facts["action_tokens"]``: tokens the policy generated at
    each step (what length-based rewards such as ``overlong_penalty`` read)."""
    counts = [len(s.token_ids) for s in ro.segments if s.kind == "action"]
    return replace(ep, facts={**ep.facts, "action_tokens": counts})


def scripted_rollouts(
    policy: Policy,
    env: Environment,
    tasks: list[Task],
    *,
    rng: random.Random,
    max_turns: int,
    max_total_tokens: int,
) -> list[Rollout]:
    """Rollouts whose actions come from ``session.random_action`` (warm-start data):
    the same segment layout as :func:`play`, with the end-of-action token appended."""
    out: list[Rollout] = []
    for g, task in enumerate(tasks):
        sess = env.start(task)
        ro = Rollout(task=task, group=g, index=0)
        ids = prompt_ids(policy, task)
        ro.segments.append(Segment(0, "prompt", ids, "prompt"))
        length = len(ids)
        for turn in range(max_turns):
            act = policy.renderer.action_ids(sess.random_action(rng))
            if length + len(act) > max_total_tokens:
                break
            ro.segments.append(Segment(turn, "action", act, None))
            length += len(act)
            result = sess.step(policy.renderer.action_text(act))
            if result.done:
                break
            obs = observation_ids(policy, result.observation)
            ro.segments.append(
                Segment(turn, result.observation_kind, obs, result.observation_kind)
            )
            length += len(obs)
        out.append(ro)
    return out
