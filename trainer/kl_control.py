"""The KL term of a step: its coefficient (fixed or adaptive), and, with
``kl_in_reward``, the penalty subtracted from the rewards before the advantages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewards.types import RewardResult
from trainer.algorithms import ResolvedAlgorithm, adaptive_kl_coef
from trainer.batch import Batch, with_kl_penalty
from trainer.checkpoint import TrainState
from trainer.scoring import Scores
from trainer.update import token_kl

if TYPE_CHECKING:
    from trainer.single import Handle


def kl_in_reward(
    algo: ResolvedAlgorithm,
    state: TrainState,
    batch: Batch,
    scores: Scores,
    results: list[RewardResult],
    par: Handle,
) -> tuple[float | None, list[RewardResult]]:
    """Set this step's KL coefficient on ``scores``; with ``kl_in_reward`` subtract
    coef * KL from the rewards (the advantages see it, the logged reward does not).
    Returns the mean per-token KL when it was measured here (over every rank's
    tokens), and the results."""
    scores.kl_beta = algo.kl_beta if state.kl_coef is None else state.kl_coef
    if not algo.kl_in_reward or scores.ref_logprobs is None:
        return None, results
    kl = token_kl(algo, scores.old_logprobs, scores.ref_logprobs, batch.loss_mask)
    mean = par.token_mean(kl, batch.loss_mask)
    return mean, with_kl_penalty(results, kl, batch, scores.kl_beta)


def kl_step(
    algo: ResolvedAlgorithm,
    state: TrainState,
    scores: Scores,
    kl: float | None,
    samples: int,
) -> dict[str, float]:
    """The KL metrics, and the adaptive coefficient's move towards its target.

    ``samples``: the trajectories the step trained (every process's). The horizon
    counts samples, as verl's ``AdaptiveKLController.update(kl, n_steps=batch
    size)`` does: counted in steps, verl's default horizon of 10000 would move the
    coefficient 0.6% in 300 steps at 10x the target instead of 47%."""
    if scores.ref_logprobs is None or kl is None:
        return {}
    out = {"kl": kl, "kl/coef": scores.kl_beta}
    if algo.kl_target > 0:
        state.kl_coef = adaptive_kl_coef(
            scores.kl_beta,
            kl,
            target=algo.kl_target,
            horizon=algo.kl_horizon,
            n_steps=samples,
        )
    return out
