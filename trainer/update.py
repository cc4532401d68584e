"""The optimisation epochs over a scored batch (:mod:`trainer.scoring`).

On-policy with one epoch and one minibatch (no critic), the policy being
optimised *is* the sampling policy, so the scoring pass is skipped and the first training
forward supplies the old log-probs (detached) and entropy, as TRL does when
``num_iterations == 1``. ``optimise`` (a :class:`Learner`) then runs ``epochs``
passes of ``minibatches`` over the batch with the configured loss (old log-probs
kept fixed across epochs, as PPO does), each minibatch's forward and backward whole
or in micro-batches of ``micro_batch_size`` rows (:mod:`trainer.accumulate`), clips
the gradient norm and steps AdamW.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from trainer import accumulate
from trainer.algorithms import (
    ResolvedAlgorithm,
    agg_loss,
    high_entropy_mask,
    kl_penalty,
    policy_loss,
    rollout_weights,
    value_loss,
)
from trainer.algorithms.correction import is_masked
from trainer.batch import Batch
from trainer.compiled_layers import compiled_layers
from trainer.config import OptimConfig
from trainer.distributed import combine_metrics
from trainer.policy import Policy, TokenStats
from trainer.scoring import Scores

if TYPE_CHECKING:
    from trainer.single import Handle


# The loss-mask reasons of single tokens the update leaves out (trajectory events'
# ``masked``): by masked importance sampling, by the top-entropy quantile.
MASK_REASONS = (None, "is_ratio", "low_entropy")


def on_policy(algo: ResolvedAlgorithm, optim: OptimConfig) -> bool:
    """True when the update's first forward sees exactly the sampling policy (and
    nothing needs the policy's log-probs before it: a KL in the reward does)."""
    return (
        optim.epochs == 1
        and optim.minibatches == 1
        and not algo.needs_value_head
        and not algo.kl_in_reward
    )


def token_kl(
    algo: ResolvedAlgorithm,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """(B, T-1) per-token KL of the configured kind, 0 on untrained tokens."""
    keep = mask > 0
    zeros = torch.zeros_like(logprobs)
    kl = kl_penalty(
        torch.where(keep, logprobs, zeros),
        torch.where(keep, ref_logprobs, zeros),
        kind=algo.kl_kind,
        clamp=algo.kl_clamp or None,
    )
    return torch.where(keep, kl, zeros)


@dataclass(frozen=True)
class Learner:
    """Who learns and how: the policy, its optimizer, the algorithm's loss and the
    process's place in the run (alone or among several, ``trainer.single``)."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    algo: ResolvedAlgorithm
    optim: OptimConfig
    max_len: int  # the rollout's token budget: ``seq_mean_token_sum_norm``'s norm
    par: Handle


def optimise(
    learner: Learner,
    batch: Batch,
    scores: Scores,
    advantages: torch.Tensor,
    returns: torch.Tensor | None,
    *,
    generator: torch.Generator,
) -> tuple[dict[str, float], torch.Tensor]:
    """Returns averaged metrics and the log-probs of the last epoch's forward (B, T-1).

    ``batch`` is this process's share: with several, every rank cuts it into exactly
    ``minibatches`` parts (the ranks' k-th parts make the k-th global minibatch; an
    empty part trains one row with nothing trained in it, so that every rank takes
    part in every gradient all-reduce)."""
    policy, optim = learner.policy, learner.optim
    B = batch.size
    sums: dict[str, float] = {}
    count = 0
    fill = scores.old_logprobs is None
    if fill:
        shape = batch.loss_mask.shape
        scores.old_logprobs = torch.zeros(shape, device=batch.loss_mask.device)
        scores.entropy = torch.zeros(shape, device=batch.loss_mask.device)
    last_logprobs = torch.zeros_like(scores.old_logprobs)
    policy.train()
    for _epoch in range(optim.epochs):
        order = torch.randperm(B, generator=generator)
        for part in learner.par.minibatches(order, optim.minibatches):
            blank = part.numel() == 0  # several processes: this rank's part is empty
            idx = (order[:1] if blank else part).to(batch.input_ids.device)
            mb_batch = batch.select(idx)  # blank: nothing trained (Part.of)
            metrics, logprobs = _minibatch_step(
                learner,
                mb_batch,
                scores,
                idx,
                advantages[idx],
                None if returns is None else returns[idx],
                fill=fill,
                blank=blank,
            )
            if not blank:
                last_logprobs[idx] = logprobs
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
    policy.eval()
    return {k: v / max(count, 1) for k, v in sums.items()}, last_logprobs


def _minibatch_step(
    learner: Learner,
    mb: Batch,
    scores: Scores,
    idx: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor | None,
    *,
    fill: bool = False,
    blank: bool = False,
) -> tuple[dict[str, float], torch.Tensor]:
    """One minibatch: its forwards and backwards, whole or in micro-batches whose
    gradients add up to the whole's (``trainer.accumulate``), one optimizer step.
    ``blank``: this rank's share is empty (``mb`` is one row, nothing trained).
    With ``optim.compile``, a first minibatch that fails anywhere runs again whole
    eagerly (its gradients zeroed first), and the run stays eager."""
    par, optim = learner.par, learner.optim
    layers = (
        compiled_layers(learner.policy.model, par.strategy) if optim.compile else None
    )
    if layers is not None:  # several processes: every rank compiles, or none
        layers.agree(par, learner.policy.model)
    size, tokens = optim.micro_batch_size, optim.micro_batch_tokens
    may_split = (0 < size < mb.size or tokens > 0) and not blank
    lengths = mb.attention_mask.sum(1).cpu() if may_split else None
    order = accumulate.by_length(mb, lengths) if may_split else None
    parts = accumulate.plan(par, mb.size, size, blank, order, lengths, tokens)
    # Every rank's normalisers, once (a collective), for every part's loss scale.
    whole = par.all_sum(accumulate.normalisers(mb.loss_mask, blank))
    args = (learner, mb, parts, whole, scores, idx, adv, returns, fill)
    try:
        done = _accumulate(*args, layers=layers)
    except Exception as exc:
        if layers is None or not layers.give_up(exc):
            raise
        done = _accumulate(*args, layers=None)  # eagerly from now on
    if layers is not None and layers.on:
        layers.proven = True
    grad_norm = torch.nn.utils.clip_grad_norm_(
        learner.policy.parameters(), optim.grad_clip
    )
    learner.optimizer.step()
    trained = [(m, w) for _, m, w, _ in done if w[""] > 0]
    metrics = combine_metrics(trained or [(m, w) for _, m, w, _ in done[:1]])
    # fsdp: a DTensor (the norm over every rank's shards)
    whole_norm = getattr(grad_norm, "full_tensor", None)
    metrics["grad_norm"] = float(grad_norm if whole_norm is None else whole_norm())
    if len(done) == 1:
        return metrics, done[0][3]
    logprobs = done[0][3].new_zeros(mb.loss_mask.shape)
    for part, _, _, lp in done:  # back in the minibatch's row order
        logprobs[part.rows.to(lp.device)] = lp
    return metrics, logprobs


def _accumulate(learner, mb, parts, whole, scores, idx, adv, returns, fill, *, layers):
    """The minibatch's parts forward and backward, gradients zeroed first and
    added up, synchronised across ranks at the last part; per part that is not
    blank (or the one blank part of an empty share): the part, its metrics, their
    weights (the trained tokens a metric is a mean over, by name prefix; ``""``:
    the rest) and its log-probs."""
    par = learner.par
    compiled = layers.active if layers is not None else nullcontext
    pool = None
    if len(parts) > 1 and learner.algo.top_entropy_quantile < 1:
        with compiled():  # the threshold from the forward the mask is applied to
            pool = accumulate.entropy_pool(par, mb, parts)
    learner.optimizer.zero_grad(set_to_none=True)
    done: list[tuple[accumulate.Part, dict, dict[str, float], torch.Tensor]] = []
    for k, part in enumerate(parts):
        sub = part.of(mb)
        scales = accumulate.loss_scales(
            accumulate.normalisers(sub.loss_mask, part.blank), whole
        )
        with par.accumulating(sync=k == len(parts) - 1), compiled():
            loss, metrics, st = _forward_backward(
                learner,
                sub,
                scores,
                part.pick(idx),
                part.pick(adv),
                returns=part.pick(returns),
                fill=fill and not part.blank,
                blank=part.blank,
                scales=scales,
                pool=pool,
            )
        metrics["loss"] = float(loss.detach())
        if not part.blank or parts[0].blank and not done:
            weights = accumulate.metric_weights(sub)
            done.append((part, metrics, weights, st.logprobs.detach()))
    return done


def _forward_backward(
    learner, mb, scores, idx, adv, *, returns, fill, blank, scales, pool
):
    """A micro-batch's forward, loss and gradients (added to ``.grad``): its share
    of the minibatch's loss, its metrics and the forward's token stats."""
    algo = learner.algo
    st = learner.par.token_stats(
        mb.input_ids,
        mb.attention_mask,
        with_entropy=fill or algo.entropy_coef != 0 or algo.top_entropy_quantile < 1,
        entropy_grad=algo.entropy_coef != 0,
        with_values=returns is not None,
        start=mb.first_trained(),
        prefixes=mb.prefixes,
    )
    if fill:  # on-policy: this forward is the sampling policy's view
        scores.old_logprobs[idx] = st.logprobs.detach()
        scores.entropy[idx] = st.entropy.detach()
    loss, metrics = _loss(
        learner, mb, st, scores, idx, adv, returns, scales, pool, record=not blank
    )
    # DDP averages the ranks' gradients: N x each share makes it their sum.
    (loss * learner.par.world).backward()
    return loss, metrics, st


def _loss(
    learner: Learner,
    mb: Batch,
    st: TokenStats,
    scores: Scores,
    idx: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor | None,
    scales: dict[str, float],
    pool: torch.Tensor | None = None,
    *,
    record: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """A micro-batch's loss (policy, KL, value, entropy terms) and its metrics.
    Every loss is rescaled by ``scales`` from the micro-batch's normaliser to the
    whole minibatch's (every micro-batch's, every rank's tokens), so the parts'
    losses add up to the one-process, one-forward loss (alone and whole: x 1.0)."""
    algo, mask, max_len = learner.algo, mb.loss_mask, learner.max_len
    scale = scales[algo.agg]
    weights, corr, high = _token_weights(learner, mb, st, scores, idx, pool, record)
    loss, metrics = policy_loss(
        algo.loss,
        st.logprobs,
        scores.old_logprobs[idx],
        adv,
        mask,
        agg=algo.agg,
        clip_low=algo.clip_low,
        clip_high=algo.clip_high,
        max_len=max_len,
        dual_clip=algo.dual_clip or None,
        weights=weights,
        delta=algo.delta or None,
    )
    loss = loss * scale
    metrics["policy_loss"] *= scale
    metrics = {**metrics, **corr}
    if scores.ref_logprobs is not None and not algo.kl_in_reward:
        kl = (
            agg_loss(
                token_kl(algo, st.logprobs, scores.ref_logprobs[idx], mask),
                mask,
                algo.agg,
                max_len=max_len,
            )
            * scale
        )
        loss = loss + scores.kl_beta * kl
        metrics["kl"] = float(kl.detach())
    if returns is not None and st.values is not None:
        # PPO's clipped critic (CleanRL, verl): the rollout-time values anchor it.
        clip = algo.value_clip if scores.values is not None else 0.0
        vl = (
            value_loss(
                st.values,
                returns,
                mask,
                agg="token_mean",
                old_values=None if not clip else scores.values[idx],
                clip=clip or None,
            )
            * scales["token_mean"]
        )
        loss = loss + algo.value_coef * vl
        metrics["value_loss"] = float(vl.detach())
    if algo.entropy_coef != 0 and st.entropy is not None:
        # With a top-entropy mask the bonus acts on the same tokens, weighed as
        # the policy loss weighs them: the others count 0 toward the trained
        # tokens' normaliser (so micro-batches' and ranks' shares add up).
        ent_tok = st.entropy if high is None else st.entropy * high
        ent = agg_loss(ent_tok, mask, algo.agg, max_len=max_len) * scale
        loss = loss - algo.entropy_coef * ent
    return loss, metrics


def _token_weights(
    learner: Learner,
    mb: Batch,
    st: TokenStats,
    scores: Scores,
    idx: torch.Tensor,
    pool: torch.Tensor | None = None,
    record: bool = True,
) -> tuple[torch.Tensor | None, dict[str, float], torch.Tensor | None]:
    """(B, T-1) factors on the minibatch's per-token loss (None: all 1), their
    metrics, and the top-entropy mask (None: off): the sampler correction
    (truncated or masked importance weights) times that mask. Tokens they take out
    (weight 0) get their reason in ``scores.token_masks``."""
    algo, mask = learner.algo, mb.loss_mask
    weights, metrics, high = None, {}, None
    reasons = torch.zeros(mask.shape, dtype=torch.int8, device=mask.device)
    if algo.rollout_correction != "off" and mb.sampler_logprobs is not None:
        weights, metrics = rollout_weights(
            scores.old_logprobs[idx],
            mb.sampler_logprobs,
            mask,
            kind=algo.rollout_correction,
            cap=algo.rollout_correction_cap,
            mode=algo.rollout_correction_mode,
            lower=algo.rollout_correction_lower or None,
        )
        reasons[is_masked(weights, mask)] = 1
    if algo.top_entropy_quantile < 1 and st.entropy is not None:
        trained = mask > 0
        if pool is None:  # the threshold is the minibatch's: every rank's tokens
            parts = learner.par.all_gather_objects(st.entropy.detach()[trained].cpu())
            pool = torch.cat([p.to(st.entropy.device) for p in parts])
        high = high_entropy_mask(
            st.entropy, mask, algo.top_entropy_quantile, pool=pool.float()
        )
        low = trained & ~high
        reasons[low & (reasons == 0)] = 2
        factor = high.to(st.logprobs.dtype)
        weights = factor if weights is None else weights * factor
        metrics["top_entropy/masked_frac"] = float(
            low.sum() / trained.sum().clamp(min=1)
        )
    if scores.token_masks is None:
        scores.token_masks = torch.zeros(
            scores.old_logprobs.shape, dtype=torch.int8, device=mask.device
        )
    if record:
        scores.token_masks[idx] = reasons
    return weights, metrics, high
