"""Gradient accumulation: a minibatch's forward and backward in micro-batches.

``optim.micro_batch_size`` rows go through the model at a time; their gradients add
up in the parameters' ``.grad`` and the optimizer steps once per minibatch, so the
step is the whole minibatch's and only one micro-batch's activations (and logits)
are held at once. TRL's ``per_device_train_batch_size`` with
``gradient_accumulation_steps``, verl's ``ppo_micro_batch_size_per_gpu``.
``optim.micro_batch_tokens`` bounds a micro-batch by tokens instead (or as well): its
rows times its longest (verl's ``ppo_max_token_len_per_gpu``), so rows of about the
same length go together, many short ones or a few long ones (:func:`plan`).

The gradient is the whole minibatch's, not a mean of micro-batch losses: each loss
aggregation divides by a count over the whole minibatch (trained tokens, sequences
with a trained token, rows), so each micro-batch's loss is rescaled from its own
count to the minibatch's (:func:`loss_scales`), summed over every rank's share, as
the ranks' losses already were. What else spans the minibatch is taken over all of
it: the top-entropy quantile's threshold over every micro-batch's entropies
(:func:`entropy_pool`, one forward without gradients first, compiled if the
training forward is), the metrics averaged over the micro-batches weighted by the
tokens each is a mean over (:func:`metric_weights`,
:func:`trainer.distributed.combine_metrics`).

Every rank runs as many micro-batches as the rank with the most (the others add
blank ones: one row, nothing trained), because an FSDP forward is a collective;
gradients are synchronised only at the last (``Parallel.accumulating``).

Pure tensor arithmetic over the trainer's handle; no Django.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainer.batch import Batch

AGGS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


def normalisers(mask: torch.Tensor, blank: bool = False) -> list[float]:
    """What each loss aggregation (``agg_loss``, ``AGGS`` order) divides by over
    ``mask``'s rows: trained tokens, sequences with a trained token, rows. A blank
    part (a rank or micro-batch with nothing to train) counts nothing."""
    if blank:
        return [0.0, 0.0, 0.0]
    keep = mask > 0
    return [float(keep.sum()), float(keep.any(1).sum()), float(mask.shape[0])]


def loss_scales(part: list[float], whole: list[float]) -> dict[str, float]:
    """For each aggregation, a part's normaliser over the whole minibatch's: the
    factor that turns the part's loss into its share of the minibatch's loss (1.0
    exactly when the part is the whole). An empty part's loss is 0 anyway."""
    return {
        agg: max(p, 1.0) / max(w, 1.0)
        for agg, p, w in zip(AGGS, part, whole, strict=True)
    }


@dataclass(frozen=True)
class Part:
    """Rows of a minibatch (local positions; None: all of them) that go through
    the model together; a blank part trains nothing (its one row keeps the ranks'
    collectives in step)."""

    rows: torch.Tensor | None
    blank: bool = False

    def of(self, mb: Batch) -> Batch:
        """The part's rows of ``mb``, with nothing trained if it is blank."""
        sub = mb if self.rows is None else mb.select(self.rows)
        if self.blank:
            sub.loss_mask = torch.zeros_like(sub.loss_mask)
        return sub

    def pick(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """The part's rows of a per-row tensor of the minibatch."""
        if x is None or self.rows is None:
            return x
        return x[self.rows.to(x.device)]


def plan(
    par: Any,
    rows: int,
    size: int,
    blank: bool = False,
    order: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    tokens: int = 0,
) -> list[Part]:
    """A minibatch of ``rows`` rows in micro-batches of at most ``size`` rows and
    (``tokens`` > 0, with each row's ``lengths``) at most ``tokens`` tokens, a
    micro-batch's rows times its longest (0: no limit; a row longer than that goes
    alone), taken in ``order`` (None: as they are), as many on this rank as on the
    rank with the most. ``blank``: this rank's share of the minibatch is empty
    (its one row trains nothing)."""
    split = size > 0 or tokens > 0
    groups = [] if blank else _split(rows, size, order, lengths, tokens)
    count = max(len(groups), 1)
    if split and par.world > 1:
        count = max(par.all_gather_ints(count))
    if blank:
        return [Part(None, blank=True)] * count
    if len(groups) == 1:
        return [Part(None)] + [Part(torch.arange(1), blank=True)] * (count - 1)
    parts = [Part(r) for r in groups]
    return parts + [Part(torch.arange(1), blank=True)] * (count - len(parts))


def _split(rows, size, order, lengths, tokens) -> list[torch.Tensor | None]:
    """The micro-batches' rows (``[None]``: one, the whole minibatch)."""
    size = size if 0 < size < rows else rows
    taken = torch.arange(rows) if order is None else order
    if tokens <= 0 or lengths is None:
        return [None] if size >= rows else list(taken.split(size))
    width = lengths.tolist()
    groups: list[list[int]] = []
    longest = 0  # the open micro-batch's longest row
    for r in taken.tolist():
        w = width[r]
        if (
            groups
            and len(groups[-1]) < size
            and (len(groups[-1]) + 1) * max(longest, w) <= tokens
        ):
            groups[-1].append(r)
            longest = max(longest, w)
        else:
            groups.append([r])
            longest = w
    if len(groups) == 1:
        return [None]
    return [torch.tensor(g) for g in groups]


# Micro-batches of rows grouped by prompt and sorted by length (``by_length``);
# False: the minibatch's own (random) order. A switch for bench/micro_batch_bench.py.
GROUPED = True


def by_length(mb: Batch, length: torch.Tensor | None = None) -> torch.Tensor | None:
    """The order a minibatch's rows go into micro-batches: a prompt's rows
    together (read once per micro-batch, ``Policy.token_stats``), shortest first
    (``length``: each row's, on the host, if already counted), so that a
    micro-batch's rows pad to about the same length; None: as they are
    (``GROUPED`` off)."""
    if not GROUPED:
        return None
    if length is None:
        length = mb.attention_mask.sum(1).cpu()
    key = length
    if mb.prefixes is not None:
        key = mb.prefixes.of_row.cpu() * (mb.input_ids.shape[1] + 1) + length
    return torch.argsort(key, stable=True)


def metric_weights(mb: Batch) -> dict[str, float]:
    """What a part's update metrics are means over, by name prefix (``""``: the
    rest, its trained tokens): the sampler correction's are over the trained
    tokens that carry a sampler log-prob."""
    keep = mb.loss_mask > 0
    out = {"": float(keep.sum())}
    if mb.sampler_logprobs is not None:
        out["rollout_correction/"] = float(
            (keep & torch.isfinite(mb.sampler_logprobs)).sum()
        )
    return out


@torch.no_grad()
def entropy_pool(par: Any, mb: Batch, parts: list[Part]) -> torch.Tensor:
    """The entropies of every trained token of the minibatch (every rank's, every
    micro-batch's) under the current weights: what the top-entropy quantile's
    threshold is taken over, before any micro-batch's loss needs it."""
    mine = []
    for part in parts:
        sub = part.of(mb)
        st = par.token_stats(
            sub.input_ids,
            sub.attention_mask,
            with_entropy=True,
            start=sub.first_trained(),
            prefixes=sub.prefixes,
        )
        if not part.blank:
            mine.append(st.entropy[sub.loss_mask > 0].float().cpu())
    pool = torch.cat(mine) if mine else torch.zeros(0)
    return torch.cat(par.all_gather_objects(pool)).to(mb.loss_mask.device)
